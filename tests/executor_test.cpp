// The host thread-pool hook (include/ssmkit/executor.hpp): ops run under an installed executor
// give the same bits as the library's own pool with the same thread count, whatever the pool does
// with the tasks it is given (runs them on its threads, runs them inline, runs them late or never).
#include "ssmkit/executor.hpp"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "ssd_fixture.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::testing {
namespace {

// A real pool: `size` threads taking tasks from one queue.
class QueuePool : public Executor {
 public:
  explicit QueuePool(int size) {
    for (int i = 0; i < size; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~QueuePool() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void Schedule(std::function<void()> task) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
      ++scheduled_;
    }
    wake_.notify_one();
  }
  int scheduled() const { return scheduled_; }

 private:
  void Work() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }
  std::vector<std::thread> threads_;
  std::deque<std::function<void()>> queue_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  int scheduled_ = 0;
};

// Runs every task at once on the calling thread.
class InlinePool : public Executor {
 public:
  void Schedule(std::function<void()> task) override { task(); }
};

// Keeps every task and runs them only when asked, after the op has returned.
class LatePool : public Executor {
 public:
  void Schedule(std::function<void()> task) override { tasks_.push_back(std::move(task)); }
  void RunAll() {
    for (auto& t : tasks_) t();
    tasks_.clear();
  }
  size_t pending() const { return tasks_.size(); }

 private:
  std::vector<std::function<void()>> tasks_;
};

struct SsdResult {
  std::vector<uint8_t> out, final_states, dx, ddt, dA, dB, dC, dD, ddt_bias;
};

// SSD forward and backward (which sums per-block partials: the case where the block split
// decides the bits) on one problem.
SsdResult RunSsd(SsdProblem& prob, const SsdOptions& options = {}) {
  HostTensor out(prob.SeqShape(), prob.c.dtype), fin(prob.StateShape(), DType::kF32);
  EXPECT_TRUE(SsdForward(prob.Inputs(), out.view(), fin.view(), options).ok());
  HostTensor dout(prob.SeqShape(), prob.c.dtype);
  dout.Fill(std::vector<double>(static_cast<size_t>(prob.SeqSize()), 0.5));
  HostTensor dx(prob.SeqShape(), prob.c.dtype),
      ddt({prob.c.batch, prob.c.seqlen, prob.c.nheads}, prob.c.dtype),
      dA({prob.c.nheads}, DType::kF32),
      dB({prob.c.batch, prob.c.seqlen, prob.c.ngroups, prob.c.dstate}, prob.c.dtype),
      dC({prob.c.batch, prob.c.seqlen, prob.c.ngroups, prob.c.dstate}, prob.c.dtype),
      dD({prob.c.nheads}, DType::kF32), ddt_bias({prob.c.nheads}, DType::kF32);
  SsdGrads g;
  g.dx = dx.view();
  g.ddt = ddt.view();
  g.dA = dA.view();
  g.dB = dB.view();
  g.dC = dC.view();
  g.dD = dD.view();
  g.ddt_bias = ddt_bias.view();
  EXPECT_TRUE(SsdBackward(prob.Inputs(), dout.view(), Tensor{}, g, options).ok());
  return {out.bytes(), fin.bytes(), dx.bytes(), ddt.bytes(),     dA.bytes(),
          dB.bytes(),  dC.bytes(),  dD.bytes(), ddt_bias.bytes()};
}

void ExpectSameBits(const SsdResult& a, const SsdResult& b) {
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.final_states, b.final_states);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.ddt, b.ddt);
  EXPECT_EQ(a.dA, b.dA);
  EXPECT_EQ(a.dB, b.dB);
  EXPECT_EQ(a.dC, b.dC);
  EXPECT_EQ(a.dD, b.dD);
  EXPECT_EQ(a.ddt_bias, b.ddt_bias);
}

class ExecutorTest : public ::testing::Test {
 protected:
  // Three blocks per loop even on a 2-core machine, so that work really is split.
  void SetUp() override { SetNumThreads(3); }
  void TearDown() override { SetNumThreads(0); }
};

TEST_F(ExecutorTest, PoolThreadsGiveTheLibraryPoolBits) {
  for (SsdAlgorithm algorithm : {SsdAlgorithm::kChunked, SsdAlgorithm::kSequential}) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(SeedTrace(seed));
    Rng rng(seed);
    SsdCase c;
    c.batch = 3;
    c.seqlen = 40;
    SsdProblem prob(c, rng);
    const SsdResult own = RunSsd(prob, Algo(algorithm, 8));
    QueuePool pool(3);
    SsdResult pooled;
    {
      ScopedExecutor scope(&pool);
      EXPECT_EQ(CurrentExecutor(), &pool);
      pooled = RunSsd(prob, Algo(algorithm, 8));
    }
    EXPECT_EQ(CurrentExecutor(), nullptr);
    EXPECT_GT(pool.scheduled(), 0);  // the pool was offered work
    ExpectSameBits(own, pooled);
  }
}

TEST_F(ExecutorTest, InlineAndLatePoolsGiveTheLibraryPoolBits) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  SsdProblem prob(SsdCase{}, rng);
  const SsdResult own = RunSsd(prob);
  InlinePool inline_pool;
  {
    ScopedExecutor scope(&inline_pool);
    ExpectSameBits(own, RunSsd(prob));
  }
  // A pool that never gets round to the tasks: the calling thread runs every block, and the
  // tasks, run after the op returned, find nothing left to do.
  LatePool late;
  {
    ScopedExecutor scope(&late);
    ExpectSameBits(own, RunSsd(prob));
  }
  EXPECT_GT(late.pending(), 0u);
  late.RunAll();
}

TEST_F(ExecutorTest, ScopesNest) {
  InlinePool outer, inner;
  ScopedExecutor a(&outer);
  {
    ScopedExecutor b(&inner);
    EXPECT_EQ(CurrentExecutor(), &inner);
  }
  EXPECT_EQ(CurrentExecutor(), &outer);
}

}  // namespace
}  // namespace ssmkit::testing
