//! Copy bandwidth and latency through the CUDA driver API (cudarc, loaded at run time).
//!
//! The method mirrors the CUDA samples' p2pBandwidthLatencyTest so figures compare: copies are
//! issued on the source GPU's stream with `cuMemcpyPeerAsync`, timed by CUDA events; while work
//! is enqueued the stream is held on a host flag (`cuStreamWaitValue32`, where the sample spins a
//! kernel) so launch overhead stays out of the timed span; bidirectional runs a second stream on
//! the destination copying the other way at the same time and counts bytes both ways; "disabled"
//! means peer access never enabled, so the driver stages copies through host memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::{CudaContext, sys};

use super::ProbeError;

/// Copies per timed run for bandwidth (the sample's `repeat`).
pub const BANDWIDTH_COPIES: u32 = 5;
/// Copies per timed run for latency (the sample's latency `repeat`).
pub const LATENCY_COPIES: u32 = 100;
/// Bytes per latency copy (one int4).
pub const LATENCY_BYTES: usize = 16;
/// A run that has not finished by then means the GPU is wedged or the flag never arrived.
const RUN_DEADLINE: Duration = Duration::from_secs(60);

fn cuda_err(step: &str) -> impl Fn(DriverError) -> ProbeError + '_ {
    move |e| ProbeError::Cuda {
        step: step.to_string(),
        message: e.to_string(),
    }
}

/// How long a held stream waits for the host before it goes anyway: the sample's spin kernel
/// gives up after 10^7 clocks (about 5 ms at 1.98 GHz). Staged (peer-disabled) copies can block
/// the host while it enqueues them, so without this the host and the held stream would wait
/// for each other.
const HOLD_TIMEOUT: Duration = Duration::from_millis(5);

/// Pinned host memory the GPUs can read: the "go" value for held streams. A held stream waits
/// until it reaches that hold's generation; values only ever grow, so a late release of an
/// old hold never frees a newer one.
struct HostFlag {
    host: *mut u32,
    generation: u32,
    /// Raises the value after [`HOLD_TIMEOUT`] unless the host did first; joined before the
    /// memory is freed.
    watchdog: Option<(WatchdogTx, std::thread::JoinHandle<()>)>,
}

/// A hold to release by its deadline, or `None` to stop.
type WatchdogTx = std::sync::mpsc::Sender<Option<(u32, Instant)>>;

fn raise(host: *mut u32, v: u32) {
    // SAFETY: `host` points at live, 4-byte aligned pinned memory (see `HostFlag`), which is
    // only ever accessed through atomics on the host.
    let flag = unsafe { std::sync::atomic::AtomicU32::from_ptr(host) };
    flag.fetch_max(v, std::sync::atomic::Ordering::SeqCst);
}

impl HostFlag {
    fn new(host: *mut u32) -> HostFlag {
        let (tx, rx) = std::sync::mpsc::channel::<Option<(u32, Instant)>>();
        let addr = host as usize;
        let thread = std::thread::Builder::new()
            .name("fleetbench-p2p-hold".into())
            .spawn(move || {
                use std::sync::mpsc::RecvTimeoutError;
                let mut pending: Option<(u32, Instant)> = None;
                loop {
                    let msg = match pending {
                        Some((_, at)) => {
                            rx.recv_timeout(at.saturating_duration_since(Instant::now()))
                        }
                        None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    };
                    match msg {
                        Ok(Some(next)) => pending = Some(next),
                        Err(RecvTimeoutError::Timeout) => {
                            if let Some((g, _)) = pending.take() {
                                raise(addr as *mut u32, g);
                            }
                        }
                        Ok(None) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .ok();
        HostFlag {
            host,
            generation: 0,
            watchdog: thread.map(|t| (tx, t)),
        }
    }

    /// A new generation for the next hold; the watchdog releases it after the timeout.
    fn next_hold(&mut self) -> u32 {
        self.generation += 1;
        if let Some((tx, _)) = &self.watchdog {
            let _ = tx.send(Some((self.generation, Instant::now() + HOLD_TIMEOUT)));
        }
        self.generation
    }

    fn release(&self) {
        raise(self.host, self.generation);
    }

    /// Stops the watchdog; after this nothing but the caller touches the memory.
    fn stop(&mut self) {
        if let Some((tx, t)) = self.watchdog.take() {
            let _ = tx.send(None);
            let _ = t.join();
        }
    }
}

struct Gpu {
    ctx: Arc<CudaContext>,
    /// Two buffers of `buffer_bytes`: `a` is copied from, `b` is written to.
    a: sys::CUdeviceptr,
    b: sys::CUdeviceptr,
    s0: sys::CUstream,
    s1: sys::CUstream,
    start: sys::CUevent,
    stop: sys::CUevent,
    mid: sys::CUevent,
    /// The host flag as this GPU addresses it.
    flag: sys::CUdeviceptr,
}

/// Open CUDA state for a probe: a context, buffers, streams and events per GPU.
pub(crate) struct Cuda {
    gpus: Vec<Gpu>,
    flag: Option<HostFlag>,
    /// `cuStreamWaitValue32` worked; without it runs are timed without holding the stream.
    hold_works: bool,
    buffer_bytes: usize,
    /// Copy within one GPU through `cuMemcpyPeerAsync` too (the one-GPU self-test uses it to
    /// run the pair code path on a host with a single GPU).
    pub peer_api_always: bool,
}

/// Whether the CUDA driver library can be loaded at all (cudarc panics on first use otherwise).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library names; no CUDA call is made.
    unsafe { sys::is_culib_present() }
}

/// Number of CUDA devices, or why not.
pub fn device_count() -> Result<u32, ProbeError> {
    if !driver_present() {
        return Err(ProbeError::NoCudaDriver);
    }
    result::init().map_err(cuda_err("cuInit"))?;
    let n = result::device::get_count().map_err(cuda_err("cuDeviceGetCount"))?;
    Ok(u32::try_from(n).unwrap_or(0))
}

/// (domain, bus, device) of a CUDA ordinal, to match NVML's indices.
pub fn pci_location(ordinal: u32) -> Result<(u32, u32, u32), ProbeError> {
    use sys::CUdevice_attribute as A;
    let dev = result::device::get(ordinal as i32).map_err(cuda_err("cuDeviceGet"))?;
    let attr = |a| {
        // SAFETY: dev is a valid device handle from cuDeviceGet.
        unsafe { result::device::get_attribute(dev, a) }
            .map(|v| v as u32)
            .map_err(cuda_err("cuDeviceGetAttribute"))
    };
    Ok((
        attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
    ))
}

impl Cuda {
    /// Opens every CUDA device (by ordinal) and allocates two buffers of `buffer_bytes` on each.
    pub fn open(ordinals: u32, buffer_bytes: usize) -> Result<Cuda, ProbeError> {
        let mut cuda = Cuda {
            gpus: Vec::new(),
            flag: None,
            hold_works: true,
            buffer_bytes,
            peer_api_always: false,
        };
        for i in 0..ordinals {
            let ctx = CudaContext::new(i as usize).map_err(cuda_err("cuDevicePrimaryCtxRetain"))?;
            ctx.bind_to_thread().map_err(cuda_err("cuCtxSetCurrent"))?;
            if cuda.flag.is_none() {
                let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
                // SAFETY: a context is current; the 4 bytes are written before any read.
                let host =
                    unsafe { result::malloc_host(4, flags) }.map_err(cuda_err("cuMemHostAlloc"))?;
                // SAFETY: a fresh 4-byte allocation; nothing else uses it yet.
                unsafe { std::ptr::write_volatile(host.cast::<u32>(), 0) };
                cuda.flag = Some(HostFlag::new(host.cast()));
            }
            let host = cuda.flag.as_ref().map_or(std::ptr::null_mut(), |f| f.host);
            // Each step's result is kept so a failure half-way still frees what was made.
            let mut gpu = Gpu {
                ctx,
                a: 0,
                b: 0,
                s0: std::ptr::null_mut(),
                s1: std::ptr::null_mut(),
                start: std::ptr::null_mut(),
                stop: std::ptr::null_mut(),
                mid: std::ptr::null_mut(),
                flag: 0,
            };
            let made = (|| -> Result<(), ProbeError> {
                // SAFETY: this GPU's context is current for every call below.
                unsafe {
                    gpu.a = result::malloc_sync(buffer_bytes).map_err(cuda_err("cuMemAlloc"))?;
                    gpu.b = result::malloc_sync(buffer_bytes).map_err(cuda_err("cuMemAlloc"))?;
                    result::memset_d8_sync(gpu.a, 0x5a, buffer_bytes)
                        .map_err(cuda_err("cuMemsetD8"))?;
                    result::memset_d8_sync(gpu.b, 0, buffer_bytes)
                        .map_err(cuda_err("cuMemsetD8"))?;
                    let mut dptr: sys::CUdeviceptr = 0;
                    sys::cuMemHostGetDevicePointer_v2(&mut dptr, host.cast(), 0)
                        .result()
                        .map_err(cuda_err("cuMemHostGetDevicePointer"))?;
                    gpu.flag = dptr;
                }
                let kind = || result::stream::StreamKind::NonBlocking;
                gpu.s0 = result::stream::create(kind()).map_err(cuda_err("cuStreamCreate"))?;
                gpu.s1 = result::stream::create(kind()).map_err(cuda_err("cuStreamCreate"))?;
                let timing = sys::CUevent_flags::CU_EVENT_DEFAULT;
                gpu.start = result::event::create(timing).map_err(cuda_err("cuEventCreate"))?;
                gpu.stop = result::event::create(timing).map_err(cuda_err("cuEventCreate"))?;
                gpu.mid = result::event::create(timing).map_err(cuda_err("cuEventCreate"))?;
                Ok(())
            })();
            cuda.gpus.push(gpu);
            made?;
        }
        Ok(cuda)
    }

    pub fn hold_works(&self) -> bool {
        self.hold_works
    }

    fn bind(&self, i: usize) -> Result<(), ProbeError> {
        self.gpus[i]
            .ctx
            .bind_to_thread()
            .map_err(cuda_err("cuCtxSetCurrent"))
    }

    /// Whether `src` can address `dst`'s memory directly.
    pub fn can_access_peer(&self, src: usize, dst: usize) -> Result<bool, ProbeError> {
        let mut can = 0;
        // SAFETY: both device handles come from live contexts.
        unsafe {
            sys::cuDeviceCanAccessPeer(
                &mut can,
                self.gpus[src].ctx.cu_device(),
                self.gpus[dst].ctx.cu_device(),
            )
        }
        .result()
        .map_err(cuda_err("cuDeviceCanAccessPeer"))?;
        Ok(can != 0)
    }

    /// Enables (or disables) peer access both ways between `x` and `y`.
    pub fn set_peer(&self, x: usize, y: usize, enabled: bool) -> Result<(), ProbeError> {
        for (from, to) in [(x, y), (y, x)] {
            self.bind(from)?;
            let peer = self.gpus[to].ctx.cu_ctx();
            // SAFETY: `from`'s context is current and `peer` is a live context.
            let rc = unsafe {
                if enabled {
                    sys::cuCtxEnablePeerAccess(peer, 0)
                } else {
                    sys::cuCtxDisablePeerAccess(peer)
                }
            };
            match rc {
                sys::CUresult::CUDA_SUCCESS
                | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
                | sys::CUresult::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED => {}
                other => {
                    let step = if enabled {
                        "cuCtxEnablePeerAccess"
                    } else {
                        "cuCtxDisablePeerAccess"
                    };
                    return Err(cuda_err(step)(DriverError(other)));
                }
            }
        }
        Ok(())
    }

    /// Holds `stream` of GPU `i` until [`Cuda::release`]. False if the driver refused.
    fn hold(&mut self, i: usize, stream: sys::CUstream) -> bool {
        if !self.hold_works {
            return false;
        }
        let dptr = self.gpus[i].flag;
        let Some(flag) = &mut self.flag else {
            return false;
        };
        let generation = flag.next_hold();
        let wait = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: the flag is pinned, device-mapped memory alive as long as `self`.
        let rc = unsafe { sys::cuStreamWaitValue32_v2(stream, dptr, generation, wait) };
        if rc != sys::CUresult::CUDA_SUCCESS {
            self.hold_works = false;
            flag.release();
            return false;
        }
        true
    }

    fn release(&self) {
        if let Some(flag) = &self.flag {
            flag.release();
        }
    }

    /// Waits for `event` with a deadline, then returns ms between `start` and `event`.
    fn finish(&self, start: sys::CUevent, stop: sys::CUevent) -> Result<f64, ProbeError> {
        let deadline = Instant::now() + RUN_DEADLINE;
        loop {
            // SAFETY: `stop` is a live event recorded on a live stream.
            match unsafe { result::event::query(stop) } {
                Ok(()) => break,
                Err(DriverError(sys::CUresult::CUDA_ERROR_NOT_READY)) => {
                    if Instant::now() > deadline {
                        return Err(ProbeError::Timeout {
                            seconds: RUN_DEADLINE.as_secs(),
                        });
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
                Err(e) => return Err(cuda_err("cuEventQuery")(e)),
            }
        }
        // SAFETY: both events were recorded and `stop` has completed.
        let ms = unsafe { result::event::elapsed(start, stop) }
            .map_err(cuda_err("cuEventElapsedTime"))?;
        Ok(f64::from(ms))
    }

    fn copy(
        &self,
        src: usize,
        dst: usize,
        bytes: usize,
        stream: sys::CUstream,
    ) -> Result<(), ProbeError> {
        let (s, d) = (&self.gpus[src], &self.gpus[dst]);
        // SAFETY: buffers are live and at least `bytes` long; the stream's context is current.
        unsafe {
            if src == dst && !self.peer_api_always {
                result::memcpy_dtod_async(d.b, s.a, bytes, stream)
                    .map_err(cuda_err("cuMemcpyDtoDAsync"))
            } else {
                result::memcpy_peer_async(d.ctx.cu_ctx(), d.b, s.ctx.cu_ctx(), s.a, bytes, stream)
                    .map_err(cuda_err("cuMemcpyPeerAsync"))
            }
        }
    }

    /// One timed run of `copies` copies `src` → `dst` on `src`'s stream; seconds.
    /// `hold`: keep the stream waiting while enqueuing (for at most [`HOLD_TIMEOUT`]).
    pub fn time_uni(
        &mut self,
        src: usize,
        dst: usize,
        bytes: usize,
        copies: u32,
        hold: bool,
    ) -> Result<f64, ProbeError> {
        let bytes = bytes.min(self.buffer_bytes);
        self.bind(src)?;
        let (stream, start, stop) = (self.gpus[src].s0, self.gpus[src].start, self.gpus[src].stop);
        let held = hold && self.hold(src, stream);
        let enqueued = (|| -> Result<(), ProbeError> {
            // SAFETY: events and stream belong to `src`'s current context.
            unsafe { result::event::record(start, stream) }.map_err(cuda_err("cuEventRecord"))?;
            for _ in 0..copies {
                self.copy(src, dst, bytes, stream)?;
            }
            // SAFETY: as above.
            unsafe { result::event::record(stop, stream) }.map_err(cuda_err("cuEventRecord"))
        })();
        if held {
            self.release();
        }
        enqueued?;
        Ok(self.finish(start, stop)? / 1000.0)
    }

    /// One timed run of `copies` copies each way at once (`src` → `dst` on `src`'s stream,
    /// `dst` → `src` on `dst`'s); seconds from the common start to the later end.
    pub fn time_bidi(
        &mut self,
        src: usize,
        dst: usize,
        bytes: usize,
        copies: u32,
        hold: bool,
    ) -> Result<f64, ProbeError> {
        let bytes = bytes.min(self.buffer_bytes);
        let (s0, start, stop) = (self.gpus[src].s0, self.gpus[src].start, self.gpus[src].stop);
        let (s1, mid) = (self.gpus[dst].s1, self.gpus[dst].mid);
        self.bind(src)?;
        let held = hold && self.hold(src, s0);
        let enqueued = (|| -> Result<(), ProbeError> {
            // SAFETY: each call's stream and events belong to the context bound just before.
            unsafe {
                result::event::record(start, s0).map_err(cuda_err("cuEventRecord"))?;
                self.bind(dst)?;
                result::stream::wait_event(
                    s1,
                    start,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
                .map_err(cuda_err("cuStreamWaitEvent"))?;
                // The order of p2pBandwidthLatencyTest: every copy of the reverse direction
                // first, then the forward ones. Interleaving them gave 63 GB/s through the host
                // on the 2×H200 VM where the sample measures 52.5, so its order is kept for
                // comparable figures.
                for _ in 0..copies {
                    self.copy(dst, src, bytes, s1)?;
                }
                result::event::record(mid, s1).map_err(cuda_err("cuEventRecord"))?;
                self.bind(src)?;
                for _ in 0..copies {
                    self.copy(src, dst, bytes, s0)?;
                }
                result::stream::wait_event(s0, mid, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
                    .map_err(cuda_err("cuStreamWaitEvent"))?;
                result::event::record(stop, s0).map_err(cuda_err("cuEventRecord"))
            }
        })();
        if held {
            self.release();
        }
        enqueued?;
        self.bind(src)?;
        Ok(self.finish(start, stop)? / 1000.0)
    }
}

impl Drop for Cuda {
    fn drop(&mut self) {
        self.release();
        for g in &self.gpus {
            if g.ctx.bind_to_thread().is_err() {
                continue;
            }
            // SAFETY: everything below was made in this context and is not used after this.
            // Errors are ignored: there is nothing left to do with them while dropping.
            unsafe {
                let _ = result::ctx::synchronize();
                for e in [g.start, g.stop, g.mid] {
                    if !e.is_null() {
                        let _ = result::event::destroy(e);
                    }
                }
                for s in [g.s0, g.s1] {
                    if !s.is_null() {
                        let _ = result::stream::destroy(s);
                    }
                }
                for p in [g.a, g.b] {
                    if p != 0 {
                        let _ = result::free_sync(p);
                    }
                }
            }
        }
        if let Some(flag) = &mut self.flag {
            flag.stop();
        }
        if let (Some(flag), Some(g)) = (&self.flag, self.gpus.first())
            && g.ctx.bind_to_thread().is_ok()
        {
            // SAFETY: allocated by cuMemHostAlloc in `open`; no stream uses it any more.
            let _ = unsafe { result::free_host(flag.host.cast()) };
        }
    }
}
