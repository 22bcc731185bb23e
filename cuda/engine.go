//go:build troupecuda

package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"gorgonia.org/cu"
	"gorgonia.org/tensor"
)

func (b Buffer) dptr() cu.DevicePtr { return cu.DevicePtr(b.ptr) }

// rawDevice is the uncached allocator: cuMemAlloc / cuMemFree.
type rawDevice struct{ e *Engine }

func (r rawDevice) Alloc(n int64) (p uintptr, err error) {
	err = r.e.do(func() error {
		d, err := cu.MemAlloc(n)
		p = uintptr(d)
		return err
	})
	return p, err
}

func (r rawDevice) Free(p uintptr) error {
	return r.e.do(func() error { return cu.MemFree(cu.DevicePtr(p)) })
}

// Options configures NewEngine.
type Options struct {
	// Device is the ordinal of the GPU (0 for the first).
	Device int
	// TF32 lets Gemm use the tensor-core TF32 kernel on GPUs of compute
	// capability 8.0 or newer. Products are then rounded to TF32 (10-bit
	// mantissa), as with PyTorch's allow_tf32; results differ from FP32 by
	// about 1e-3 relative. Off by default.
	TF32 bool
	// MaxCached bounds the bytes the caching allocator keeps (0: no bound).
	MaxCached int64
}

// Engine drives one GPU through the CUDA driver API: it owns the device's
// primary context, the loaded kernel modules, a caching allocator and a
// current stream on which every operation is enqueued in order. It
// implements gorgonia.org/tensor's Engine (and NonStdEngine), so
//
//	d := tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(2, 3), tensor.WithEngine(e))
//
// allocates d on the device. Device tensors are not accessible from Go: copy
// with ToDevice/ToHost (or DenseToDevice/DenseToHost).
//
// CUDA contexts are per OS thread; every Engine call locks its goroutine to
// its thread and makes the context current for the duration, so an Engine may
// be used from any goroutine (calls are serialised by the stream, not by a
// lock: concurrent callers should use separate streams).
type Engine struct {
	dev  cu.Device
	ctx  cu.CUContext
	name string
	cc   int // compute capability, major*10+minor
	sms  int
	tf32 bool

	alloc  *CachingAllocator
	stream *Stream
	mods   []cu.Module
	fns    map[string]cu.Function

	closeOnce sync.Once
}

// NewEngine opens GPU opts.Device, loads every embedded kernel module its
// compute capability supports (the driver JIT-compiles the PTX) and creates
// the default stream.
func NewEngine(opts Options) (*Engine, error) {
	dev, err := cu.GetDevice(opts.Device)
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", opts.Device, err)
	}
	e := &Engine{dev: dev, fns: map[string]cu.Function{}}
	if e.name, err = dev.Name(); err != nil {
		return nil, fmt.Errorf("cuda: device name: %w", err)
	}
	maj, err := dev.Attribute(cu.ComputeCapabilityMajor)
	if err != nil {
		return nil, fmt.Errorf("cuda: compute capability: %w", err)
	}
	min, err := dev.Attribute(cu.ComputeCapabilityMinor)
	if err != nil {
		return nil, fmt.Errorf("cuda: compute capability: %w", err)
	}
	e.cc = maj*10 + min
	if e.sms, err = dev.Attribute(cu.MultiprocessorCount); err != nil {
		return nil, fmt.Errorf("cuda: SM count: %w", err)
	}
	if e.ctx, err = dev.RetainPrimaryCtx(); err != nil {
		return nil, fmt.Errorf("cuda: retain primary context: %w", err)
	}
	e.alloc = NewCachingAllocator(rawDevice{e})
	e.alloc.MaxCached = opts.MaxCached
	for _, m := range modules {
		if m.MinArch > e.cc {
			continue
		}
		ptx, err := PTX(m.Name)
		if err != nil {
			return nil, err
		}
		err = e.do(func() error {
			mod, err := cu.LoadData(ptx)
			if err != nil {
				return fmt.Errorf("cuda: load module %s (JIT for sm_%d): %w", m.Name, e.cc, err)
			}
			e.mods = append(e.mods, mod)
			for _, name := range m.Entries {
				fn, err := mod.Function(name)
				if err != nil {
					return fmt.Errorf("cuda: kernel %s.%s: %w", m.Name, name, err)
				}
				e.fns[name] = fn
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	e.tf32 = opts.TF32 && e.cc >= 80
	if e.stream, err = e.NewStream(); err != nil {
		return nil, err
	}
	return e, nil
}

// do runs f with the engine's context current on a locked OS thread.
func (e *Engine) do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(e.ctx); err != nil {
		return fmt.Errorf("cuda: set context: %w", err)
	}
	return f()
}

// Name returns the GPU's name.
func (e *Engine) Name() string { return e.name }

// ComputeCapability returns major*10+minor (e.g. 90 for an H100/H200).
func (e *Engine) ComputeCapability() int { return e.cc }

// TF32 reports whether Gemm uses the TF32 tensor-core kernel.
func (e *Engine) TF32() bool { return e.tf32 }

// SetTF32 turns the TF32 GEMM path on or off (on only takes effect on
// compute capability 8.0+).
func (e *Engine) SetTF32(on bool) { e.tf32 = on && e.cc >= 80 }

// Allocator returns the engine's caching allocator (for its statistics).
func (e *Engine) Allocator() *CachingAllocator { return e.alloc }

// Close synchronises, frees cached memory, unloads the modules and destroys
// the engine's default stream. The device's primary context stays retained
// (it is shared by the process); live Buffers stay allocated.
func (e *Engine) Close() error {
	var err error
	e.closeOnce.Do(func() {
		err = errors.Join(e.Synchronize(), e.alloc.Release())
		err = errors.Join(err, e.do(func() error {
			var errs error
			for _, m := range e.mods {
				errs = errors.Join(errs, m.Unload())
			}
			if e.stream != nil {
				errs = errors.Join(errs, e.stream.s.Destroy())
			}
			return errs
		}))
	})
	return err
}

// ---- streams and events ----

// Stream is an ordered queue of device work.
type Stream struct {
	e *Engine
	s cu.Stream
}

// NewStream creates a stream that does not synchronise with the legacy
// default stream.
func (e *Engine) NewStream() (*Stream, error) {
	s, err := create(e, "stream", func() (cu.Stream, error) { return cu.MakeStream(cu.NonBlocking) })
	if err != nil {
		return nil, err
	}
	return &Stream{e: e, s: s}, nil
}

// create runs make on the engine's thread, naming what in its error.
func create[T any](e *Engine, what string, make func() (T, error)) (T, error) {
	var v T
	err := e.do(func() (err error) {
		v, err = make()
		return err
	})
	if err != nil {
		return v, fmt.Errorf("cuda: create %s: %w", what, err)
	}
	return v, nil
}

// Synchronize blocks until all work queued on s has finished.
func (s *Stream) Synchronize() error {
	return s.e.do(func() error { return s.s.Synchronize() })
}

// Wait makes all future work on s wait for ev.
func (s *Stream) Wait(ev *Event) error {
	return s.e.do(func() error { return s.s.Wait(ev.ev, 0) })
}

// Destroy releases the stream.
func (s *Stream) Destroy() error {
	return s.e.do(func() error { return s.s.Destroy() })
}

// Stream returns the stream the engine currently enqueues on.
func (e *Engine) Stream() *Stream { return e.stream }

// SetStream makes s the stream for subsequent operations and returns the
// previous one.
func (e *Engine) SetStream(s *Stream) *Stream {
	old := e.stream
	e.stream = s
	return old
}

// Synchronize waits for the current stream.
func (e *Engine) Synchronize() error {
	if e.stream == nil {
		return nil
	}
	return e.stream.Synchronize()
}

// Event marks a point in a stream, for ordering between streams and timing.
type Event struct {
	e  *Engine
	ev cu.Event
}

// NewEvent creates an event that records timing.
func (e *Engine) NewEvent() (*Event, error) {
	ev, err := create(e, "event", func() (cu.Event, error) { return cu.MakeEvent(cu.DefaultEvent) })
	if err != nil {
		return nil, err
	}
	return &Event{e: e, ev: ev}, nil
}

// Record enqueues the event on s (nil: the engine's current stream).
func (ev *Event) Record(s *Stream) error {
	if s == nil {
		s = ev.e.stream
	}
	return ev.e.do(func() error { return ev.ev.Record(s.s) })
}

// Synchronize blocks until the event has completed.
func (ev *Event) Synchronize() error {
	return ev.e.do(func() error { return ev.ev.Synchronize() })
}

// Elapsed returns the device time between ev and end (both recorded and complete).
func (ev *Event) Elapsed(end *Event) (time.Duration, error) {
	var ms float64
	err := ev.e.do(func() (err error) {
		ms, err = ev.ev.Elapsed(end.ev)
		return err
	})
	return time.Duration(ms * float64(time.Millisecond)), err
}

// Destroy releases the event.
func (ev *Event) Destroy() error {
	return ev.e.do(func() error { return cu.DestroyEvent(&ev.ev) })
}

// ---- memory ----

// NewBuffer allocates n 4-byte elements from the caching allocator. The
// contents are undefined.
func (e *Engine) NewBuffer(n int) (Buffer, error) {
	if n <= 0 {
		n = 1
	}
	p, _, err := e.alloc.Alloc(int64(n) * 4)
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{ptr: p, bytes: int64(n) * 4}, nil
}

// Zeros allocates n elements set to zero.
func (e *Engine) Zeros(n int) (Buffer, error) {
	b, err := e.NewBuffer(n)
	if err != nil {
		return b, err
	}
	e.Memclr(b)
	return b, nil
}

// FreeBuffer returns b to the caching allocator. Work already queued on the
// engine's stream that reads b is ordered before any later reuse.
func (e *Engine) FreeBuffer(b Buffer) error { return e.alloc.Free(b.ptr) }

// ToDevice copies host data to a new device buffer.
func (e *Engine) ToDevice(host []float32) (Buffer, error) {
	b, err := e.NewBuffer(len(host))
	if err != nil {
		return b, err
	}
	if len(host) == 0 {
		return b, nil
	}
	err = e.htod(b.dptr(), unsafe.Pointer(&host[0]), int64(len(host))*4)
	if err != nil {
		e.FreeBuffer(b)
		return Buffer{}, fmt.Errorf("cuda: copy %d floats to device: %w", len(host), err)
	}
	return b, nil
}

// IDsToDevice copies integer ids to a new device buffer of int32s.
func (e *Engine) IDsToDevice(ids []int) (Buffer, error) {
	h := make([]int32, len(ids))
	for i, v := range ids {
		if v > math.MaxInt32 || v < math.MinInt32 {
			return Buffer{}, fmt.Errorf("cuda: id %d at %d does not fit int32", v, i)
		}
		h[i] = int32(v)
	}
	b, err := e.NewBuffer(len(h))
	if err != nil || len(h) == 0 {
		return b, err
	}
	err = e.htod(b.dptr(), unsafe.Pointer(&h[0]), int64(len(h))*4)
	if err != nil {
		e.FreeBuffer(b)
		return Buffer{}, fmt.Errorf("cuda: copy %d ids to device: %w", len(h), err)
	}
	return b, nil
}

// Upload copies host into the existing device buffer dst (len(host) ≤
// dst.Len()), ordered after the work already queued on the engine's stream.
func (e *Engine) Upload(dst Buffer, host []float32) error {
	if len(host) > dst.Len() {
		panic(fmt.Sprintf("cuda: Upload of %d floats into a %d-element buffer", len(host), dst.Len()))
	}
	if len(host) == 0 {
		return nil
	}
	return e.htod(dst.dptr(), unsafe.Pointer(&host[0]), int64(len(host))*4)
}

// ToHost copies min(len(dst), src.Len()) elements of src to dst after all
// work queued on the engine's stream, and waits for them.
func (e *Engine) ToHost(dst []float32, src Buffer) error {
	n := min(len(dst), src.Len())
	if n == 0 {
		return e.Synchronize()
	}
	return e.dtoh(unsafe.Pointer(&dst[0]), src.dptr(), int64(n)*4)
}

// HostCopy returns a new host slice with the contents of src.
func (e *Engine) HostCopy(src Buffer) ([]float32, error) {
	h := make([]float32, src.Len())
	return h, e.ToHost(h, src)
}

// CopyBuffer enqueues a device-to-device copy of min(dst.Len(), src.Len()) elements.
func (e *Engine) CopyBuffer(dst, src Buffer) error {
	n := min(dst.Len(), src.Len())
	if n == 0 {
		return nil
	}
	return e.do(func() error { return cu.MemcpyDtoDAsync(dst.dptr(), src.dptr(), int64(n)*4, e.stream.s) })
}

// DenseToDevice copies a float32 host tensor to a new device-resident
// *tensor.Dense of the same shape whose engine is e.
func (e *Engine) DenseToDevice(t *tensor.Dense) (*tensor.Dense, error) {
	if t.Dtype() != tensor.Float32 {
		return nil, fmt.Errorf("cuda: DenseToDevice of %v tensor (only float32)", t.Dtype())
	}
	host, ok := t.Data().([]float32)
	if !ok {
		return nil, fmt.Errorf("cuda: DenseToDevice: tensor data is %T", t.Data())
	}
	if t.IsMaterializable() {
		return nil, fmt.Errorf("cuda: DenseToDevice of a view (shape %v); Materialize it first", t.Shape())
	}
	d := tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(t.Shape().Clone()...), tensor.WithEngine(e))
	if len(host) > 0 {
		if err := e.Upload(BufferAt(d.Uintptr(), len(host)), host); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// DenseToHost copies a device-resident float32 tensor (engine e) to a new
// host *tensor.Dense.
func (e *Engine) DenseToHost(d *tensor.Dense) (*tensor.Dense, error) {
	n := d.Shape().TotalSize()
	h := make([]float32, n)
	if err := e.ToHost(h, BufferAt(d.Uintptr(), n)); err != nil {
		return nil, err
	}
	return tensor.New(tensor.WithShape(d.Shape().Clone()...), tensor.WithBacking(h)), nil
}

// DenseBuffer returns the device buffer behind a device-resident tensor.
func DenseBuffer(d *tensor.Dense) Buffer { return BufferAt(d.Uintptr(), d.Shape().TotalSize()) }

// ---- gorgonia.org/tensor Engine ----

var _ tensor.Engine = (*Engine)(nil)
var _ tensor.NonStdEngine = (*Engine)(nil)

// AllocAccessible reports false: device memory is not Go-accessible.
func (e *Engine) AllocAccessible() bool { return false }

// NonStdAlloc marks Engine as a tensor.NonStdEngine.
func (e *Engine) NonStdAlloc() {}

// Alloc allocates size bytes of device memory from the caching allocator.
func (e *Engine) Alloc(size int64) (tensor.Memory, error) {
	if size <= 0 {
		size = 4
	}
	p, _, err := e.alloc.Alloc(size)
	if err != nil {
		return nil, err
	}
	return Buffer{ptr: p, bytes: size}, nil
}

// Free returns memory obtained from Alloc to the cache.
func (e *Engine) Free(mem tensor.Memory, size int64) error { return e.alloc.Free(mem.Uintptr()) }

// Memset sets every element of device memory mem to val (float32, int32,
// uint32 or byte).
func (e *Engine) Memset(mem tensor.Memory, val interface{}) error {
	p, n := cu.DevicePtr(mem.Uintptr()), int64(mem.MemSize())
	return e.do(func() error {
		switch v := val.(type) {
		case float32:
			return cu.MemsetD32Async(p, uint(math.Float32bits(v)), n/4, e.stream.s)
		case int32:
			return cu.MemsetD32Async(p, uint(uint32(v)), n/4, e.stream.s)
		case uint32:
			return cu.MemsetD32Async(p, uint(v), n/4, e.stream.s)
		case byte:
			return cu.MemsetD8Async(p, v, n, e.stream.s)
		default:
			return fmt.Errorf("cuda: Memset with %T (want float32, int32, uint32 or byte)", val)
		}
	})
}

// Memclr zeroes device memory mem.
func (e *Engine) Memclr(mem tensor.Memory) {
	p, n := cu.DevicePtr(mem.Uintptr()), int64(mem.MemSize())
	if err := e.do(func() error { return cu.MemsetD8Async(p, 0, n, e.stream.s) }); err != nil {
		panic(fmt.Sprintf("cuda: Memclr: %v", err))
	}
}

// isDevice reports whether p lies in device memory known to the driver.
func (e *Engine) isDevice(p uintptr) bool {
	ok := false
	e.do(func() error {
		_, _, err := cu.DevicePtr(p).AddressRange()
		ok = err == nil
		return nil
	})
	return ok
}

// Memcpy copies min(size(dst), size(src)) bytes; each side may be host or
// device memory (told apart by asking the driver). All copies are ordered on
// the engine's stream; those that touch the host wait for completion.
func (e *Engine) Memcpy(dst, src tensor.Memory) error {
	n := int64(min(dst.MemSize(), src.MemSize()))
	if n == 0 {
		return nil
	}
	dd, sd := e.isDevice(dst.Uintptr()), e.isDevice(src.Uintptr())
	if dd && sd {
		return e.do(func() error {
			return cu.MemcpyDtoDAsync(cu.DevicePtr(dst.Uintptr()), cu.DevicePtr(src.Uintptr()), n, e.stream.s)
		})
	}
	switch {
	case dd:
		return e.htod(cu.DevicePtr(dst.Uintptr()), hostPtr(src.Uintptr()), n)
	case sd:
		return e.dtoh(hostPtr(dst.Uintptr()), cu.DevicePtr(src.Uintptr()), n)
	}
	return errors.New("cuda: Memcpy between two host buffers (use the standard engine)")
}

// htod copies n bytes of host memory to the device in the engine's stream
// order (after all work queued before it) and waits for the copy, so the
// host memory may be reused on return.
func (e *Engine) htod(dst cu.DevicePtr, src unsafe.Pointer, n int64) error {
	return e.do(func() error {
		if err := cu.MemcpyHtoDAsync(dst, src, n, e.stream.s); err != nil {
			return fmt.Errorf("cuda: copy %d bytes to device: %w", n, err)
		}
		return e.stream.s.Synchronize()
	})
}

// dtoh copies n device bytes to host memory in stream order and waits.
func (e *Engine) dtoh(dst unsafe.Pointer, src cu.DevicePtr, n int64) error {
	return e.do(func() error {
		if err := cu.MemcpyDtoHAsync(dst, src, n, e.stream.s); err != nil {
			return fmt.Errorf("cuda: copy %d bytes to host: %w", n, err)
		}
		return e.stream.s.Synchronize()
	})
}

// hostPtr turns the address of Go-managed host memory (a tensor's backing
// array, which the caller keeps alive) into a pointer for the driver.
func hostPtr(u uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&u)) }

// Accessible returns an error: device memory cannot be read from Go. Copy it
// with ToHost or DenseToHost.
func (e *Engine) Accessible(mem tensor.Memory) (tensor.Memory, error) {
	return nil, errors.New("cuda: device memory is not host-accessible; copy it with Engine.ToHost")
}

// WorksWith reports whether kernels can use data in this order directly:
// contiguous row-major only.
func (e *Engine) WorksWith(order tensor.DataOrder) bool {
	return order.IsRowMajor() && order.IsContiguous() && !order.IsTransposed()
}
