#include "backends/cpu/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln::cpu {
namespace {

// Spin iterations before a worker sleeps. A kernel sequence issues parallel_for calls a few
// microseconds apart; a short spin avoids a futex wake-up for each, while the bound keeps
// idle workers from burning a core that other processes need.
constexpr int kSpinIterations = 4000;

// The pool whose parallel_for body the current thread is running, to run nested calls inline.
thread_local const ThreadPool* t_running_pool = nullptr;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class RunningPoolScope {
 public:
  explicit RunningPoolScope(const ThreadPool* pool) : saved_(t_running_pool) { t_running_pool = pool; }
  ~RunningPoolScope() { t_running_pool = saved_; }

 private:
  const ThreadPool* saved_;
};

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  workers_.reserve(static_cast<std::size_t>(num_threads - 1));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t grain,
                              FunctionRef<void(std::int64_t, std::int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  if (workers_.empty() || n <= grain || t_running_pool == this) {
    fn(0, n);
    return;
  }
  // About 8 chunks per thread balance uneven chunks without many atomic claims.
  const std::int64_t threads = num_threads();
  job_.fn = &fn;
  job_.n = n;
  job_.chunk = std::max(grain, n / (threads * 8));
  next_index_.store(0, std::memory_order_relaxed);
  pending_workers_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    // Bumping under the mutex pairs with the predicate check in wait_for_job: no lost wake-up.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_cv_.notify_all();
  {
    RunningPoolScope scope(this);
    run_chunks();
  }
  wait_for_workers();
}

void ThreadPool::run_chunks() {
  const std::int64_t n = job_.n;
  const std::int64_t chunk = job_.chunk;
  for (;;) {
    const std::int64_t begin = next_index_.fetch_add(chunk, std::memory_order_relaxed);
    if (begin >= n) return;
    (*job_.fn)(begin, std::min(n, begin + chunk));
  }
}

void ThreadPool::wait_for_workers() {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (pending_workers_.load(std::memory_order_acquire) == 0) return;
    cpu_relax();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [this] { return pending_workers_.load(std::memory_order_acquire) == 0; });
}

bool ThreadPool::wait_for_job(std::uint64_t seen) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (generation_.load(std::memory_order_acquire) != seen) return true;
    cpu_relax();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  wake_cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
  return !stop_;
}

void ThreadPool::worker_loop() {
  RunningPoolScope scope(this);
  std::uint64_t seen = 0;
  while (wait_for_job(seen)) {
    seen = generation_.load(std::memory_order_acquire);
    run_chunks();
    if (pending_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Taking the mutex orders this notify after the caller's predicate check.
      std::lock_guard<std::mutex> lock(mutex_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace kiln::cpu
