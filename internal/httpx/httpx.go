// Package httpx holds what troupe's HTTP servers share: request errors and
// their two answer shapes (OpenAI's {"error": {...}} and FastAPI's
// {"detail": ...}), bounded body reading, JSON decoding that names the
// offending field, secret comparison, the http.Server constructor with its
// timeouts, and the guards of a server on a loopback address (Guard,
// WrapListener).
package httpx

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Error is an error a handler answers with.
type Error struct {
	Status int
	Msg    string
	Param  string // the offending field, for OpenAI-style errors
	Code   string
}

func (e *Error) Error() string { return e.Msg }

// BadRequest is a 400 naming the offending field.
func BadRequest(field, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	return &Error{Status: http.StatusBadRequest, Msg: msg, Param: field}
}

// ReadBody reads at most limit bytes of the request body.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *Error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &Error{Status: http.StatusRequestEntityTooLarge,
				Msg: fmt.Sprintf("request body exceeds the limit of %d bytes", limit), Code: "request_too_large"}
		}
		return nil, &Error{Status: http.StatusBadRequest, Msg: "reading request body: " + err.Error()}
	}
	return body, nil
}

// DecodeJSON unmarshals body into dst and turns JSON errors into 400s that
// name the field.
func DecodeJSON(body []byte, dst any) *Error {
	if len(bytes.TrimSpace(body)) == 0 {
		return BadRequest("", "empty request body; a JSON object is required")
	}
	err := json.Unmarshal(body, dst)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return BadRequest("", "request body must be a JSON object, got %s", te.Value)
		}
		return BadRequest(field, "expected %s, got %s", jsonKind(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		if bytes.Contains(body, []byte("NaN")) || bytes.Contains(body, []byte("Infinity")) {
			return BadRequest("", "invalid JSON at byte %d: NaN and Infinity are not valid JSON numbers (rewards must be finite)", se.Offset)
		}
		return BadRequest("", "invalid JSON at byte %d: %v", se.Offset, err)
	default:
		return BadRequest("", "invalid JSON: %v", err)
	}
}

func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "float"), strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"):
		return "a number"
	case k == "string":
		return "a string"
	case k == "bool":
		return "a boolean"
	case k == "slice":
		return "an array"
	case k == "map", k == "struct":
		return "an object"
	}
	return k
}

// WriteJSON answers with status and v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"detail":"encoding response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// errorType is OpenAI's error type for a status.
func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// ErrorObject is e in OpenAI's error shape.
func (e *Error) ErrorObject() map[string]any {
	var param, code any
	if e.Param != "" {
		param = e.Param
	}
	if e.Code != "" {
		code = e.Code
	}
	return map[string]any{"message": e.Msg, "type": errorType(e.Status), "param": param, "code": code}
}

// OpenAIError answers in OpenAI's error shape: {"error": {...}}.
func OpenAIError(w http.ResponseWriter, e *Error) {
	WriteJSON(w, e.Status, map[string]any{"error": e.ErrorObject()})
}

// SwarmError answers the way FastAPI's HTTPException does (AgentJet's
// server): {"detail": msg, "success": false}.
func SwarmError(w http.ResponseWriter, e *Error) {
	WriteJSON(w, e.Status, map[string]any{"detail": e.Msg, "success": false})
}

// RouteError answers in both shapes at once, for a caller that may be
// either kind of client (unknown routes, wrong methods, bad credentials in
// a path).
func RouteError(w http.ResponseWriter, e *Error) {
	o := e.ErrorObject()
	o["param"] = nil
	WriteJSON(w, e.Status, map[string]any{"error": o, "detail": e.Msg})
}

// TokenEqual compares secrets in time independent of their content and
// length (both are hashed to 32 bytes first).
func TokenEqual(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// Bearer is the request's bearer token (Authorization: Bearer <token>, or
// Azure's api-key header).
func Bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return r.Header.Get("api-key")
}

// Timeouts are an http.Server's timeouts. ReadTimeout bounds the whole
// request, body included, so a body trickled byte by byte is cut;
// WriteTimeout is renewed by streaming handlers before each chunk (see
// RenewWriteDeadline), so it bounds one write, not a whole stream.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// DefaultTimeouts are the timeouts of every troupe HTTP server unless
// configured otherwise.
var DefaultTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 60 * time.Second, Idle: 120 * time.Second}

// WithDefaults fills zero timeouts from DefaultTimeouts; a negative one
// means none (a server of long-lived event streams).
func (t Timeouts) WithDefaults() Timeouts {
	pick := func(v, d time.Duration) time.Duration {
		switch {
		case v > 0:
			return v
		case v < 0:
			return 0
		}
		return d
	}
	d := DefaultTimeouts
	return Timeouts{ReadHeader: pick(t.ReadHeader, d.ReadHeader), Read: pick(t.Read, d.Read), Write: pick(t.Write, d.Write), Idle: pick(t.Idle, d.Idle)}
}

// NewServer returns an http.Server for h with timeouts t (zero fields:
// DefaultTimeouts) that logs its own errors to log at debug level. Served
// on a listener from WrapListener, it answers a request that carries both
// Content-Length and Transfer-Encoding with 400 and closes its connection.
func NewServer(h http.Handler, t Timeouts, log *slog.Logger) *http.Server {
	t = t.WithDefaults()
	if log == nil {
		log = slog.Default()
	}
	return &http.Server{Handler: refuseSmuggled(h), ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, WriteTimeout: t.Write,
		IdleTimeout: t.Idle, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug), ConnContext: connContext}
}

// RenewWriteDeadline gives the next write d from now. An http.Server's
// WriteTimeout runs from the end of the request headers, which a long
// generation or stream would exceed; renewed before each write, it bounds
// how long one write may block instead, so a client that stops reading is
// cut. Writers without deadlines (test recorders) are left alone.
func RenewWriteDeadline(w http.ResponseWriter, d time.Duration) {
	if d > 0 {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
	}
}
