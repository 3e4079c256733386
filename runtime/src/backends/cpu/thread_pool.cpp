#include "backends/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long a thread spins (PAUSE) before it sleeps, as time: a PAUSE lasts 10 to 140
// cycles depending on the CPU. A kernel sequence issues parallel_for calls microseconds
// apart, with serial kernels between them that can last a few hundred microseconds (a
// classifier's GEMV, a small layer run inline); a spin that outlasts those gaps avoids a
// futex wake-up per call, which costs 7-12 us on this project's 2-vCPU VM (measured: a
// parallel_for of two tiny chunks after a 100 us gap took 7.2 us with a 70 us spin, 0.16 us
// with 1 ms; mobilenet_v3_small at 224x224 on 2 threads 1.08-1.84 ms -> 1.03 ms). The bound
// keeps an idle worker from taking a core from other work for more than 1 ms after a run
// (ONNX Runtime's pool spins likewise).
constexpr auto kSpinTime = std::chrono::microseconds(1000);

// Spins until done() or kSpinTime passed; true when done() held.
template <typename Done>
bool spin_until(Done done) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    if (done()) return true;
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() - start > kSpinTime) return done();
  }
}

// The pool whose parallel_for body the current thread is running, to run nested calls inline.
thread_local const ThreadPool* t_running_pool = nullptr;
thread_local int t_worker_index = 0;  // ThreadPool::thread_index


class RunningPoolScope {
 public:
  explicit RunningPoolScope(const ThreadPool* pool) : saved_(t_running_pool) {
    t_running_pool = pool;
  }
  ~RunningPoolScope() { t_running_pool = saved_; }

 private:
  const ThreadPool* saved_;
};

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  shares_ = std::make_unique<Share[]>(static_cast<std::size_t>(num_threads));
  workers_.reserve(static_cast<std::size_t>(num_threads - 1));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t grain, Body fn) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  if (workers_.empty() || n <= grain || t_running_pool == this) {
    fn(0, n);
    return;
  }
  // About 8 chunks per thread balance uneven chunks without many claims; the chunk count
  // must fit the 24-bit fields of a share.
  const std::int64_t threads = num_threads();
  std::int64_t chunk = std::max(grain, n / (threads * 8));
  chunk = std::max(chunk, n / (std::int64_t{1} << 23) + 1);
  const std::int64_t total = (n + chunk - 1) / chunk;
  job_fn_.store(&fn, std::memory_order_relaxed);
  job_n_.store(n, std::memory_order_relaxed);
  job_chunk_.store(chunk, std::memory_order_relaxed);
  job_chunks_.store(total, std::memory_order_relaxed);
  chunks_done_.store(0, std::memory_order_relaxed);
  const std::uint32_t generation = ++generation_;
  const std::uint64_t tag = std::uint64_t{generation & 0xffffu} << 48;
  for (std::int64_t t = 0; t < threads; ++t) {
    const auto begin = static_cast<std::uint64_t>(total * t / threads);
    const auto end = static_cast<std::uint64_t>(total * (t + 1) / threads);
    shares_[static_cast<std::size_t>(t)].slot.store(tag | end << 24 | begin, std::memory_order_release);
  }
  {
    // Publishing under the mutex pairs with the predicate check in wait_for_job.
    std::lock_guard<std::mutex> lock(mutex_);
    job_generation_.store(generation, std::memory_order_release);
  }
  wake_cv_.notify_all();
  {
    RunningPoolScope scope(this);
    run_chunks(0, generation);
  }
  wait_for_chunks(total);
}

void ThreadPool::run_chunks(int index, std::uint32_t generation) {
  const int threads = num_threads();
  const std::uint64_t tag = generation & 0xffffu;
  for (int k = 0; k < threads; ++k) {
    Share& share = shares_[static_cast<std::size_t>((index + k) % threads)];
    std::uint64_t claim = share.slot.load(std::memory_order_acquire);
    for (;;) {
      const std::uint64_t next = claim & 0xffffffu, end = claim >> 24 & 0xffffffu;
      if (claim >> 48 != tag) return;  // the job moved on
      if (next >= end) break;
      if (!share.slot.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        continue;
      }
      // Claimed chunk `next` of the job whose shares these are: its fields are this job's.
      const std::int64_t total = job_chunks_.load(std::memory_order_relaxed);
      const std::int64_t chunk = job_chunk_.load(std::memory_order_relaxed);
      const auto begin = static_cast<std::int64_t>(next) * chunk;
      (*job_fn_.load(std::memory_order_relaxed))(begin,
                                                 std::min(job_n_.load(std::memory_order_relaxed), begin + chunk));
      if (chunks_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == total) {
        // Taking the mutex orders this notify after the caller's predicate check.
        std::lock_guard<std::mutex> lock(mutex_);
        done_cv_.notify_one();
      }
      claim = share.slot.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::wait_for_chunks(std::int64_t total) {
  auto done = [&] { return chunks_done_.load(std::memory_order_acquire) == total; };
  if (spin_until(done)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, done);
}

bool ThreadPool::wait_for_job(std::uint32_t seen) {
  auto published = [&] { return job_generation_.load(std::memory_order_acquire) != seen; };
  if (spin_until(published)) return true;
  std::unique_lock<std::mutex> lock(mutex_);
  wake_cv_.wait(lock, [&] { return stop_ || published(); });
  return !stop_;
}

int ThreadPool::thread_index() { return t_worker_index; }

void ThreadPool::worker_loop(int index) {
  RunningPoolScope scope(this);
  t_worker_index = index;
  std::uint32_t seen = 0;
  while (wait_for_job(seen)) {
    seen = job_generation_.load(std::memory_order_acquire);
    run_chunks(index, seen);
  }
}

}  // namespace kiln::cpu
