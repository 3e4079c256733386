#include "backends/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace kiln::cpu {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnceWithChunksOfAtLeastGrain) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    ASSERT_EQ(pool.num_threads(), threads);
    for (std::int64_t n : {0, 1, 2, 7, 64, 1000, 12345}) {
      for (std::int64_t grain : {0, 1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        std::atomic<int> short_chunks{0};
        pool.parallel_for(n, grain, [&](std::int64_t begin, std::int64_t end) {
          ASSERT_LE(0, begin);
          ASSERT_LT(begin, end);
          ASSERT_LE(end, n);
          if (end != n && end - begin < std::max<std::int64_t>(grain, 1)) ++short_chunks;
          for (std::int64_t i = begin; i < end; ++i) hits[static_cast<std::size_t>(i)]++;
        });
        EXPECT_EQ(short_chunks.load(), 0)
            << "threads=" << threads << " n=" << n << " grain=" << grain;
        for (std::int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1)
              << "threads=" << threads << " n=" << n << " grain=" << grain << " i=" << i;
        }
      }
    }
  }
}

TEST(ThreadPoolTest, ZeroThreadsMeansHardwareConcurrency) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.num_threads(),
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(ThreadPoolTest, SingleThreadPoolRunsInlineOnCaller) {
  ThreadPool pool(1);
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  pool.parallel_for(100, 1, [&](std::int64_t begin, std::int64_t end) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 100);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPoolTest, UsesWorkerThreads) {
  ThreadPool pool(3);
  std::mutex mutex;
  std::set<std::thread::id> ids;
  pool.parallel_for(64, 1, [&](std::int64_t, std::int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::lock_guard<std::mutex> lock(mutex);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_GT(ids.size(), 1u);
}

// Each thread runs its own share of the indices first (the caller the first half of them,
// the worker the second): whatever the scheduling, the worker's first chunk is one of its
// own. It can only take the caller's after claiming all of its own, and the caller takes
// the worker's only after all of its own, which leaves the worker nothing.
TEST(ThreadPoolTest, EachThreadRunsItsOwnShareFirst) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  int worker_calls = 0;
  for (int call = 0; call < 200; ++call) {
    std::mutex mutex;
    std::int64_t worker_first = -1;
    pool.parallel_for(20, 1, [&](std::int64_t begin, std::int64_t) {
      // ~20 us a chunk, so that the worker usually takes part.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      while (std::chrono::steady_clock::now() < until) {
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (std::this_thread::get_id() != caller && worker_first < 0) worker_first = begin;
    });
    if (worker_first < 0) continue;
    ++worker_calls;
    ASSERT_GE(worker_first, 10) << "call " << call;
  }
  EXPECT_GT(worker_calls, 0) << "the worker ran no chunk in 200 calls";
}

// thread_index: 0 on the caller (and on any thread that is no pool's worker), i on worker
// i, whichever chunks each thread ends up running.
TEST(ThreadPoolTest, ThreadIndexNamesTheCallerAndEachWorker) {
  EXPECT_EQ(ThreadPool::thread_index(), 0);
  ThreadPool pool(4);
  std::mutex mu;
  std::set<std::pair<std::thread::id, int>> seen;
  for (int round = 0; round < 20; ++round) {
    pool.parallel_for(64, 1, [&](std::int64_t, std::int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      std::lock_guard<std::mutex> lock(mu);
      seen.emplace(std::this_thread::get_id(), ThreadPool::thread_index());
    });
  }
  std::set<int> indices;
  std::map<std::thread::id, int> index_of;
  for (const auto& [id, index] : seen) {
    EXPECT_TRUE(index_of.emplace(id, index).second || index_of[id] == index) << "a thread with two indices";
    indices.insert(index);
    EXPECT_EQ(index == 0, id == std::this_thread::get_id());
  }
  EXPECT_EQ(indices.size(), index_of.size());  // one index per thread
  for (int index : indices) EXPECT_TRUE(index >= 0 && index < 4) << index;
  std::thread other([] { EXPECT_EQ(ThreadPool::thread_index(), 0); });
  other.join();
}

TEST(ThreadPoolTest, ManyBackToBackCallsAllComplete) {
  ThreadPool pool(3);
  std::atomic<std::int64_t> sum{0};
  for (int call = 0; call < 3000; ++call) {
    pool.parallel_for(10, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) sum += i;
    });
  }
  EXPECT_EQ(sum.load(), 3000 * 45);
}

TEST(ThreadPoolTest, NestedCallOnSamePoolRunsInline) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(40 * 40);
  pool.parallel_for(40, 1, [&](std::int64_t b0, std::int64_t e0) {
    for (std::int64_t i = b0; i < e0; ++i) {
      pool.parallel_for(40, 1, [&](std::int64_t b1, std::int64_t e1) {
        for (std::int64_t j = b1; j < e1; ++j) hits[static_cast<std::size_t>(i * 40 + j)]++;
      });
    }
  });
  for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPoolTest, DestroysCleanlyIdleOrAfterWork) {
  for (int round = 0; round < 20; ++round) {
    ThreadPool idle(4);
    ThreadPool busy(3);
    std::atomic<int> count{0};
    busy.parallel_for(100, 1, [&](std::int64_t begin, std::int64_t end) {
      count += static_cast<int>(end - begin);
    });
    EXPECT_EQ(count.load(), 100);
  }
}

TEST(ThreadPoolTest, FunctionRefCallsTheReferencedCallable) {
  int state = 1;
  auto add = [&state](int x) { return state + x; };
  FunctionRef<int(int)> ref = add;
  EXPECT_EQ(ref(2), 3);
  state = 10;
  EXPECT_EQ(ref(2), 12);
}

}  // namespace
}  // namespace kiln::cpu
