package jinja

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Limits bound one render, so that a chat template from an untrusted model
// directory cannot keep a core busy or exhaust memory: a template that
// builds a 64 MiB string and tests `'y' in s` in a loop, or upper-cases it
// a thousand times, fails with a *BudgetError instead. A zero or negative
// field takes its default.
type Limits struct {
	// MaxOutputBytes bounds the rendered text.
	MaxOutputBytes int64
	// MaxWorkBytes bounds the work of the render, counted in bytes read and
	// written by every string operation (in, startswith, ==, ~, +, filters,
	// slicing, output). So that the count follows CPU time, an operation
	// that decodes each character (length, trim, comparison, slicing,
	// JSON escaping) counts each byte it reads 4 times, a case mapping
	// (upper, lower, title, capitalize) 16 times; a line of indent, a
	// replacement of replace and a character of join count 16 bytes, an
	// evaluation step 64, a loop iteration 512, and each list item or
	// mapping entry copied, compared or created 16.
	MaxWorkBytes int64
	// MaxAllocBytes bounds the memory of the strings and lists a render
	// creates (a list item counts 16 bytes, a string its bytes, a string
	// built piece by piece its buffers), summed over the whole render:
	// garbage counts too, so the memory a render holds stays below it.
	MaxAllocBytes int64
}

// The default Limits. The real Qwen3, Llama 3 and Llama 3.2 templates with
// 128 tools and a 1 MiB conversation take, in their worst case (52,000
// messages of 20 bytes: 3 million evaluation steps, 4 MiB of output), 60%
// of the work budget and 30% of the others; with messages of a few hundred
// bytes, less than a tenth. A hostile template spends the work budget in
// about a second of CPU time.
const (
	DefaultMaxOutputBytes = 16 << 20
	DefaultMaxWorkBytes   = 512 << 20
	DefaultMaxAllocBytes  = 128 << 20
)

// withDefaults fills in the zero fields.
func (l Limits) withDefaults() Limits {
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if l.MaxWorkBytes <= 0 {
		l.MaxWorkBytes = DefaultMaxWorkBytes
	}
	if l.MaxAllocBytes <= 0 {
		l.MaxAllocBytes = DefaultMaxAllocBytes
	}
	return l
}

// ErrBudget matches, with errors.Is, every *BudgetError: a render that ran
// past one of its Limits or one of the package's fixed bounds.
var ErrBudget = errors.New("jinja: render budget exceeded")

// BudgetError is the error of a render stopped by a limit. Limit names it:
// "MaxOutputBytes", "MaxWorkBytes" or "MaxAllocBytes" for the fields of
// Limits, "string length" (bytes in one string), "list length" (items in
// one list) or "macro call depth" for the fixed bounds; Value is the
// limit's value. Line and Column locate the expression that crossed it.
// The error is the template's doing, not the conversation's, when the
// conversation is of a reasonable size.
type BudgetError struct {
	Limit        string
	Value        int64
	Line, Column int
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("jinja: render at line %d, column %d exceeds the %s limit of %d", e.Line, e.Column, e.Limit, e.Value)
}

// Is reports whether target is ErrBudget.
func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// stopped is the panic value that ends a render whose context is done.
type stopped struct{ err error }

// Weights of the work count (see Limits.MaxWorkBytes).
const (
	stepCost   = 64 // one evaluation step
	itemCost   = 16 // one list item or mapping entry
	scanCost   = 4  // per byte decoded character by character
	mapCost    = 16 // per byte mapped character by character
	checkEvery = 1 << 20
)

// spend counts n bytes of work, and every checkEvery bytes looks whether
// the render's context is done.
func (ip *interp) spend(n int64) {
	ip.work += n
	if ip.work > ip.lim.MaxWorkBytes {
		ip.exceed("MaxWorkBytes", ip.lim.MaxWorkBytes)
	}
	if ip.work >= ip.nextCheck {
		ip.nextCheck = ip.work + checkEvery
		ip.checkContext()
	}
}

// spendScan and spendMap count the work of decoding and of mapping the
// characters of n bytes.
func (ip *interp) spendScan(n int) { ip.spend(int64(n) * scanCost) }
func (ip *interp) spendMap(n int)  { ip.spend(int64(n) * mapCost) }

// produce counts a new string of n bytes: the work of writing it and the
// memory it takes. It fails before the string is made when n exceeds the
// bound on one string.
func (ip *interp) produce(n int) {
	if n > maxStringLen {
		ip.tooLong()
	}
	ip.allocate(int64(n))
}

// produceItems counts a new list (or set of mapping entries) of n items.
func (ip *interp) produceItems(n int) { ip.allocate(int64(n) * itemCost) }

// checkListLen fails when a list a template makes grows past maxListLen
// items (the lists of its input may be longer).
func (ip *interp) checkListLen(n int) {
	if n > maxListLen {
		ip.exceed("list length", maxListLen)
	}
}

func (ip *interp) allocate(n int64) {
	ip.alloc += n
	if ip.alloc > ip.lim.MaxAllocBytes {
		ip.exceed("MaxAllocBytes", ip.lim.MaxAllocBytes)
	}
	ip.spend(n)
}

func (ip *interp) tooLong() { ip.exceed("string length", maxStringLen) }

func (ip *interp) exceed(limit string, value int64) {
	panic(&BudgetError{Limit: limit, Value: value, Line: ip.at.line, Column: ip.at.col})
}

func (ip *interp) checkContext() {
	if ip.ctx == nil {
		return
	}
	select {
	case <-ip.ctx.Done():
	default:
		return
	}
	err := ip.ctx.Err()
	why := "the request was cancelled"
	if errors.Is(err, context.DeadlineExceeded) {
		why = "the deadline passed"
	}
	if cause := context.Cause(ip.ctx); cause != nil && cause != err {
		why += " (" + cause.Error() + ")"
	}
	panic(stopped{fmt.Errorf("jinja: render stopped at line %d, column %d: %s: %w", ip.at.line, ip.at.col, why, err)})
}

// write appends s to b: to the render's output, within MaxOutputBytes, or
// to a string being built (a macro's output, a {% set %} block, JSON),
// within maxStringLen. The memory it counts is the builder's: when b must
// grow, it doubles, and the new buffer is counted before it is made.
func (ip *interp) write(b *strings.Builder, s string) {
	if b == ip.out {
		if int64(b.Len())+int64(len(s)) > ip.lim.MaxOutputBytes {
			ip.exceed("MaxOutputBytes", ip.lim.MaxOutputBytes)
		}
	} else if b.Len()+len(s) > maxStringLen {
		ip.tooLong()
	}
	ip.spend(int64(len(s)))
	if b.Cap()-b.Len() < len(s) {
		// strings.Builder.Grow makes a buffer of twice the capacity plus
		// the request (appending would grow large buffers by a quarter,
		// and copy five times what it keeps).
		ip.allocate(2*int64(b.Cap()) + int64(len(s)))
		b.Grow(len(s))
	}
	b.WriteString(s)
}

func (ip *interp) writeByte(b *strings.Builder, c byte) { ip.write(b, string(rune(c))) }
