// A small fork-join thread pool for CPU kernels, and FunctionRef, the non-owning callable
// reference its parallel_for takes (no allocation per call).
//
//   ThreadPool pool(0);                        // one thread per hardware thread
//   pool.parallel_for(rows, /*grain=*/64, [&](int64_t begin, int64_t end) {
//     for (int64_t r = begin; r < end; ++r) process(r);
//   });
//
// Threading contract:
// - One caller at a time per pool: parallel_for must not be called concurrently from two
//   threads on the same pool (give each executor its own pool). A call made from inside a
//   parallel_for body on the same pool (nesting) is detected and runs inline on the calling
//   thread, so it is correct but not parallel.
// - The body must not throw (the runtime is built with -fno-exceptions) and must be safe to
//   run concurrently on disjoint [begin, end) ranges.
// - Workers wait on a condition variable when idle (after a bounded spin, 1 ms,
//   that keeps kernel calls with serial work between them cheap); an idle pool uses no CPU.
// - Chunks are claimed dynamically and the caller runs chunks too, so a worker that the OS
//   has not scheduled (a busy machine) delays nothing: the caller waits only for chunks
//   that some thread has already started.
// - Each thread first claims the chunks of its own share of [0, n): thread t (the caller
//   is 0, worker i is i) the t-th of num_threads() equal ranges, in order, and only then
//   takes what is left of the others' shares. So two calls that map indices to data the
//   same way (a convolution's channel blocks, then the next one's) run each part of the
//   data on the same core, where the first call left it in cache: on a machine whose
//   cores do not share their L2 (two vCPUs on different core complexes), a kernel that
//   reads what another core just wrote runs up to 3x slower than on data of its own.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln::cpu {

template <typename Signature>
class FunctionRef;

/// A non-owning reference to a callable, like std::function_ref (C++26). It stores a
/// pointer to the callable: the callable must outlive every call through the FunctionRef
/// (pass lambdas directly as arguments; do not store a FunctionRef to a temporary).
template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
           std::is_invocable_r_v<R, F&, Args...>)
      FunctionRef(F&& f)  // NOLINT: implicit by design, like std::function_ref
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

class ThreadPool {
 public:
  /// `num_threads` counts the calling thread: 1 = no worker threads (every parallel_for
  /// runs inline), N = N-1 workers plus the caller, 0 (or negative) = one per hardware
  /// thread (std::thread::hardware_concurrency(), at least 1).
  explicit ThreadPool(int num_threads);
  /// Stops and joins the workers. Must not run concurrently with parallel_for.
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads that run a parallel_for body, the caller included (>= 1).
  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  /// The calling thread's index among the threads that run bodies: i on worker i (of the
  /// pool it belongs to), 0 on any thread that is not a pool's worker (a caller). Kernels
  /// use it to give each thread the same part of a buffer from call to call.
  static int thread_index();

  /// Calls fn(begin, end) on disjoint chunks that cover [0, n) exactly once, on the workers
  /// and the calling thread, and returns when all chunks are done. Chunks hold at least
  /// `grain` indices (except the last); grain < 1 counts as 1. Chunks are claimed
  /// dynamically, so uneven work balances itself. n <= 0 calls nothing; when n <= grain or
  /// the pool has one thread, fn(0, n) runs inline.
  void parallel_for(std::int64_t n, std::int64_t grain,
                    FunctionRef<void(std::int64_t, std::int64_t)> fn);

  /// A grain for parallel_for over n items of `item_cost` work each that gives every
  /// thread an even share, in as many chunks as there are threads at most, but no chunk
  /// under `min_chunk_cost` (so small work runs inline). A plain `min_chunk_cost /
  /// item_cost` grain would split 444 rows as 442 + 2.
  std::int64_t even_grain(std::int64_t n, std::int64_t item_cost, std::int64_t min_chunk_cost) const {
    const std::int64_t total = n * std::max<std::int64_t>(item_cost, 1);
    const std::int64_t parts = std::clamp<std::int64_t>(total / std::max<std::int64_t>(min_chunk_cost, 1), 1,
                                                        num_threads());
    return (n + parts - 1) / parts;
  }

 private:
  using Body = FunctionRef<void(std::int64_t, std::int64_t)>;

  void worker_loop(int index);
  // Waits (bounded spin, then sleep) for a generation other than `seen`; false on shutdown.
  bool wait_for_job(std::uint32_t seen);
  // Claims and runs chunks of job `generation`, thread `index`'s share first, until none
  // is left or the job moved on.
  void run_chunks(int index, std::uint32_t generation);
  void wait_for_chunks(std::int64_t total);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_cv_;  // job published or shutdown
  std::condition_variable done_cv_;  // last chunk of a job finished
  bool stop_ = false;                // guarded by mutex_
  std::uint32_t generation_ = 0;     // caller-side count of published jobs

  // The published job's generation (workers wake on a change). Its chunks are claimed
  // from shares_: share t = generation (low 16 bits) << 48 | end << 24 | next chunk of
  // thread t's range, claimed by CAS of next + 1 while the generation is the claimer's and
  // next < end. A job ends only when every chunk is done, so a worker that wakes late
  // claims nothing of a finished job: it finds every share spent, or another generation's
  // (and goes back to wait for that job, to start it from its own share). The job_*
  // fields are written before the shares are (release) and read only after a claim.
  std::atomic<std::uint32_t> job_generation_{0};
  struct alignas(64) Share {
    std::atomic<std::uint64_t> slot{0};
  };
  std::unique_ptr<Share[]> shares_;
  std::atomic<Body*> job_fn_{nullptr};
  std::atomic<std::int64_t> job_n_{0};
  std::atomic<std::int64_t> job_chunk_{1};
  std::atomic<std::int64_t> job_chunks_{0};
  std::atomic<std::int64_t> chunks_done_{0};
};

}  // namespace kiln::cpu
