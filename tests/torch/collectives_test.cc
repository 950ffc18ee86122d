// kolo::torch tensor collectives, ranks as threads: one Engine and one
// kolo::torch::Context per rank.
#include <gtest/gtest.h>

#include <kolo/torch.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/harness.h"

namespace {

namespace kt = kolo::torch;
using kolo::test::spawn;

class TorchCollectives : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

const std::vector<at::ScalarType> kAllTypes = {at::kFloat, at::kDouble, at::kHalf,
                                               at::kBFloat16, at::kInt,  at::kLong,
                                               at::kShort, at::kChar,   at::kByte,
                                               at::kBool};

std::string typeName(at::ScalarType t) { return c10::toString(t); }

// Rank r's contribution: small integers, exact in every dtype.
at::Tensor contribution(int rank, at::ScalarType type) {
  at::Tensor base = torch::arange(6, torch::kLong).reshape({2, 3}) + rank;
  if (type == at::kBool) return (base % 2).to(at::kBool);
  return base.to(type);
}

template <typename Fn>
void expectThrowContaining(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception containing '" << needle << "'";
  } catch (const kolo::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST_F(TorchCollectives, AllreduceSumMinMaxOnEveryDtype) {
  const int n = 3;
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    for (at::ScalarType type : kAllTypes) {
      at::Tensor expectSum = contribution(0, at::kLong);
      for (int r = 1; r < n; ++r) expectSum = expectSum + contribution(r, at::kLong);
      at::Tensor got = ctx.allreduce(contribution(rank, type), kt::Sum, "sum." + typeName(type));
      EXPECT_EQ(got.scalar_type(), type);
      if (type == at::kBool) {
        at::Tensor any = contribution(0, at::kBool);
        for (int r = 1; r < n; ++r) any = any.logical_or(contribution(r, at::kBool));
        EXPECT_TRUE(torch::equal(got, any)) << typeName(type);
      } else {
        EXPECT_TRUE(torch::equal(got.to(at::kLong), expectSum)) << typeName(type);
      }
      at::Tensor mn = ctx.allreduce(contribution(rank, type), kt::Min, "min." + typeName(type));
      at::Tensor mx = ctx.allreduce(contribution(rank, type), kt::Max, "max." + typeName(type));
      if (type != at::kBool) {  // bool min/max are and/or, checked through sum above
        EXPECT_TRUE(torch::equal(mn, contribution(0, type))) << typeName(type);
        EXPECT_TRUE(torch::equal(mx, contribution(n - 1, type))) << typeName(type);
      }
    }
  });
}

TEST_F(TorchCollectives, AllreduceAverageAndScaleFactors) {
  const int n = 2;
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    for (at::ScalarType type : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
      at::Tensor t = torch::full({5}, rank == 0 ? 1.0 : 3.0).to(type);
      at::Tensor avg = ctx.allreduce(t, kt::Average, "avg." + typeName(type));
      EXPECT_TRUE(torch::equal(avg, torch::full({5}, 2.0).to(type))) << typeName(type);
      // (1*0.5 + 3*0.5) * 4 = 8
      at::Tensor scaled = ctx.allreduce(t, kt::Sum, "scaled." + typeName(type), 0.5, 4.0);
      EXPECT_TRUE(torch::equal(scaled, torch::full({5}, 8.0).to(type))) << typeName(type);
    }
    // Integers: scaled in float64 and truncated, per rank before the sum and
    // once after it (Horovod's rule): trunc(1*0.5)+trunc(3*0.5) = 1, then 4.
    for (at::ScalarType type : {at::kInt, at::kLong, at::kShort, at::kChar, at::kByte}) {
      at::Tensor t = torch::full({5}, rank == 0 ? 1 : 3, at::kLong).to(type);
      at::Tensor scaled = ctx.allreduce(t, kt::Sum, "iscaled." + typeName(type), 0.5, 4.0);
      EXPECT_TRUE(torch::equal(scaled, torch::full({5}, 4, at::kLong).to(type))) << typeName(type);
      at::Tensor avg = ctx.allreduce(t, kt::Average, "iavg." + typeName(type));
      EXPECT_TRUE(torch::equal(avg, torch::full({5}, 2, at::kLong).to(type))) << typeName(type);
    }
    // A 0-dim tensor and an empty one.
    at::Tensor scalar = torch::scalar_tensor(static_cast<double>(rank + 1));
    EXPECT_EQ(ctx.allreduce(scalar, kt::Sum, "scalar").item<float>(), 3.0f);
    EXPECT_EQ(ctx.allreduce(torch::empty({0, 4}), kt::Sum, "empty").numel(), 0);
  });
}

TEST_F(TorchCollectives, InPlaceVariantsIncludingNonContiguous) {
  const int n = 2;
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    at::Tensor t = torch::full({3, 4}, static_cast<float>(rank + 1));
    at::Tensor same = ctx.allreduce_(t, kt::Sum, "inplace");
    EXPECT_TRUE(same.is_same(t));
    EXPECT_TRUE(torch::equal(t, torch::full({3, 4}, 3.0f)));

    // Non-contiguous: worked on in a contiguous copy, copied back.
    at::Tensor storage = torch::arange(12, torch::kFloat).reshape({3, 4}) * (rank + 1);
    at::Tensor view = storage.t();
    ASSERT_FALSE(view.is_contiguous());
    ctx.allreduce_(view, kt::Sum, "noncontiguous");
    EXPECT_TRUE(torch::equal(storage, torch::arange(12, torch::kFloat).reshape({3, 4}) * 3));

    at::Tensor column = torch::zeros({4, 2});
    at::Tensor col = column.select(1, 1);
    col.fill_(static_cast<float>(rank + 10));
    kt::TensorHandle h = ctx.allreduce_async_(col, kt::Sum, "column");
    at::Tensor result = h.wait();
    EXPECT_TRUE(result.is_same(col));
    EXPECT_TRUE(torch::equal(column.select(1, 1), torch::full({4}, 21.0f)));
    EXPECT_TRUE(torch::equal(column.select(1, 0), torch::zeros({4})));

    // broadcast_ in place on a leaf that requires grad (as parameters do).
    at::Tensor leaf = torch::full({2}, static_cast<float>(rank), torch::requires_grad());
    ctx.broadcast_(leaf, 1, "leaf");
    EXPECT_TRUE(torch::equal(leaf.detach(), torch::full({2}, 1.0f)));
  });
}

TEST_F(TorchCollectives, AsyncHandlesWithGeneratedNames) {
  const int n = 3;
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    std::vector<kt::TensorHandle> handles;
    for (int i = 0; i < 6; ++i) {
      handles.push_back(ctx.allreduce_async(torch::full({i + 1}, static_cast<float>(rank + i)),
                                            kt::Sum));
    }
    for (int i = 5; i >= 0; --i) {
      at::Tensor got = kt::synchronize(handles[i]);
      EXPECT_TRUE(kt::poll(handles[i]));
      EXPECT_TRUE(torch::equal(got, torch::full({i + 1}, static_cast<float>(3 * i + 3))));
      EXPECT_TRUE(handles[i].wait().is_same(got));
    }
    // A dropped handle still keeps its tensors alive until completion.
    ctx.allreduce_async(torch::ones({1000}), kt::Sum, "dropped");
    ctx.barrier();
  });
}

TEST_F(TorchCollectives, GroupedAllreduce) {
  const int n = 2;
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    std::vector<at::Tensor> in = {torch::full({3}, static_cast<float>(rank)),
                                  torch::full({2, 2}, static_cast<float>(2 * rank)),
                                  torch::full({1}, static_cast<float>(rank + 5))};
    std::vector<at::Tensor> out = ctx.grouped_allreduce(in, kt::Sum, "group");
    ASSERT_EQ(out.size(), 3u);
    EXPECT_TRUE(torch::equal(out[0], torch::full({3}, 1.0f)));
    EXPECT_TRUE(torch::equal(out[1], torch::full({2, 2}, 2.0f)));
    EXPECT_TRUE(torch::equal(out[2], torch::full({1}, 11.0f)));
    auto avg = ctx.grouped_allreduce(in);  // generated name, Average
    EXPECT_TRUE(torch::equal(avg[2], torch::full({1}, 5.5f)));
  });
}

TEST_F(TorchCollectives, AllgatherWithDifferentFirstDims) {
  const int n = 3;
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    for (at::ScalarType type : kAllTypes) {
      // Rank r sends r+1 rows of value r (bool: r % 2).
      at::Tensor mine = torch::full({rank + 1, 2}, rank % (type == at::kBool ? 2 : 100))
                            .to(type);
      at::Tensor got = ctx.allgather(mine, "gather." + typeName(type));
      std::vector<at::Tensor> parts;
      for (int r = 0; r < n; ++r) {
        parts.push_back(torch::full({r + 1, 2}, r % (type == at::kBool ? 2 : 100)).to(type));
      }
      EXPECT_TRUE(torch::equal(got, torch::cat(parts, 0))) << typeName(type);
    }
    // A rank may contribute no rows.
    at::Tensor rows = rank == 1 ? torch::empty({0, 3}) : torch::ones({2, 3});
    EXPECT_EQ(ctx.allgather(rows, "some.empty").size(0), 4);
  });
}

TEST_F(TorchCollectives, BroadcastFromEveryRoot) {
  const int n = 3;
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    for (int root = 0; root < n; ++root) {
      at::Tensor t = torch::full({4}, static_cast<int64_t>(rank * 7), torch::kLong);
      at::Tensor got = ctx.broadcast(t, root, "bcast." + std::to_string(root));
      EXPECT_TRUE(torch::equal(got, torch::full({4}, static_cast<int64_t>(root * 7), torch::kLong)));
      EXPECT_TRUE(torch::equal(t, torch::full({4}, static_cast<int64_t>(rank * 7), torch::kLong)))
          << "the out-of-place broadcast changed its input";
      ctx.broadcast_(t, root);
      EXPECT_EQ(t[0].item<int64_t>(), root * 7);
    }
  });
}

TEST_F(TorchCollectives, AlltoallWithSplitsAndEven) {
  const int n = 3;
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    // Rank r sends j+1 rows of value 10*r + j to rank j.
    std::vector<at::Tensor> parts;
    std::vector<int64_t> splits;
    for (int j = 0; j < n; ++j) {
      parts.push_back(torch::full({j + 1, 2}, static_cast<float>(10 * rank + j)));
      splits.push_back(j + 1);
    }
    kt::AlltoallResult got = ctx.alltoall(torch::cat(parts, 0), splits, "a2a");
    std::vector<at::Tensor> expect;
    for (int r = 0; r < n; ++r) {
      expect.push_back(torch::full({rank + 1, 2}, static_cast<float>(10 * r + rank)));
    }
    EXPECT_TRUE(torch::equal(got.tensor, torch::cat(expect, 0)));
    EXPECT_EQ(got.received_splits, std::vector<int64_t>(n, rank + 1));

    at::Tensor even = torch::arange(n, torch::kLong) + 100 * rank;
    kt::AlltoallResult e = ctx.alltoall(even);
    EXPECT_TRUE(torch::equal(e.tensor, torch::arange(n, torch::kLong) * 100 + rank));
  });
}

TEST_F(TorchCollectives, Reducescatter) {
  const int n = 3;
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    // 7 rows over 3 ranks: 3, 2, 2.
    at::Tensor t = torch::arange(14, torch::kFloat).reshape({7, 2}) * (rank + 1);
    at::Tensor got = ctx.reducescatter(t, kt::Sum, "rs");
    const int64_t begin = rank == 0 ? 0 : (rank == 1 ? 3 : 5);
    const int64_t rows = rank == 0 ? 3 : 2;
    at::Tensor full = torch::arange(14, torch::kFloat).reshape({7, 2}) * 6;
    EXPECT_TRUE(torch::equal(got, full.narrow(0, begin, rows)));
    at::Tensor avg = ctx.reducescatter(t);
    EXPECT_TRUE(torch::allclose(avg, full.narrow(0, begin, rows) / 3));
  });
}

TEST_F(TorchCollectives, BarrierJoinAndBroadcastObject) {
  const int n = 3;
  std::vector<int> lastJoined(n, -1);
  std::vector<std::string> objects(n);
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    ctx.barrier();
    std::string payload = rank == 1 ? std::string("state\0with\0nuls", 15) : "ignored";
    objects[rank] = ctx.broadcast_object(payload, 1);
    EXPECT_EQ(ctx.broadcast_object(rank == 0 ? "" : "x", 0), "");
    std::this_thread::sleep_for(std::chrono::milliseconds(30 * rank));
    lastJoined[rank] = ctx.join();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(objects[r], std::string("state\0with\0nuls", 15));
    EXPECT_EQ(lastJoined[r], lastJoined[0]);
  }
  EXPECT_GE(lastJoined[0], 0);
  EXPECT_LT(lastJoined[0], n);
}

TEST_F(TorchCollectives, ClearErrorsForBadTensors) {
  spawn(1, [&](int, kolo::Engine& engine) {
    kt::Context ctx(engine);
    expectThrowContaining([&] { ctx.allreduce(at::Tensor(), kt::Sum, "undef"); },
                          "allreduce 'undef': the tensor is undefined");
    expectThrowContaining(
        [&] { ctx.allreduce(torch::zeros({2}, torch::kComplexFloat), kt::Sum, "cplx"); },
        "dtype ComplexFloat is not supported");
    expectThrowContaining(
        [&] { ctx.allgather(torch::zeros({2}, torch::kComplexDouble), "cdouble"); },
        "allgather 'cdouble': dtype ComplexDouble is not supported");
    expectThrowContaining(
        [&] { ctx.allreduce(torch::eye(3).to_sparse(), kt::Sum, "sparse"); },
        "only dense");
    expectThrowContaining([&] { ctx.allreduce(torch::ones({2}, torch::kBool), kt::Sum, "s", 2.0); },
                          "not defined for bool tensors");
    expectThrowContaining([&] { ctx.broadcast(torch::ones({2}), 5, "root"); }, "root rank 5");
    expectThrowContaining(
        [&] { ctx.allreduce(torch::empty({2}, torch::device(torch::kMeta)), kt::Sum, "meta"); },
        "must be on the CPU or a CUDA device, got meta");
    // The engine still works after rejected requests.
    EXPECT_EQ(ctx.allreduce(torch::ones({2}), kt::Sum, "ok").sum().item<float>(), 2.0f);
    EXPECT_THROW(kt::TensorHandle().wait(), kolo::InvalidArgument);
  });
}

TEST_F(TorchCollectives, MismatchedShapesFailOnEveryRank) {
  spawn(2, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    at::Tensor t = torch::ones({rank == 0 ? 3 : 4});
    EXPECT_THROW(ctx.allreduce(t, kt::Sum, "mismatch"), kolo::Mismatch);
    EXPECT_EQ(ctx.allreduce(torch::ones({2}), kt::Sum, "after").sum().item<float>(), 4.0f);
  });
}

TEST_F(TorchCollectives, DtypeMappingAndDefaults) {
  for (int i = 0; i < kolo::kNumDataTypes; ++i) {
    auto dt = static_cast<kolo::DataType>(i);
    EXPECT_EQ(kt::to_data_type(kt::to_scalar_type(dt), "x"), dt);
  }
  // The default device: this rank's GPU when LibTorch sees CUDA (the local
  // rank's, or GPU 0 before init), else the CPU.
  if (torch::cuda::is_available()) {
    const auto index = static_cast<c10::DeviceIndex>(kolo::isInitialized() ? kolo::localRank() : 0);
    EXPECT_EQ(kt::device(), torch::Device(torch::kCUDA, index));
  } else {
    EXPECT_EQ(kt::device(), torch::Device(torch::kCPU));
  }
  // The default context resolves kolo::defaultEngine() lazily.
  if (!kolo::isInitialized()) {
    EXPECT_THROW(kt::allreduce(torch::ones({1})), kolo::InvalidArgument);
  }
}

TEST_F(TorchCollectives, BroadcastParametersCoversBatchNormBuffers) {
  struct Net : torch::nn::Module {
    Net() {
      fc = register_module("fc", torch::nn::Linear(4, 3));
      bn = register_module("bn", torch::nn::BatchNorm1d(3));
    }
    at::Tensor forward(const at::Tensor& x) { return bn(fc(x)); }
    torch::nn::Linear fc{nullptr};
    torch::nn::BatchNorm1d bn{nullptr};
  };
  const int n = 3;
  std::vector<std::vector<at::Tensor>> states(n);
  spawn(n, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    auto net = std::make_shared<Net>();
    {
      torch::NoGradGuard noGrad;
      for (auto& p : net->parameters()) p.add_(rank);
    }
    net->train();
    net->forward(torch::full({5, 4}, static_cast<float>(rank)) + torch::arange(5).unsqueeze(1));
    kt::broadcast_parameters(*net, /*root=*/2, ctx);
    for (auto& p : net->parameters()) states[rank].push_back(p.detach().clone());
    for (auto& b : net->buffers()) states[rank].push_back(b.clone());
    EXPECT_TRUE(net->fc->weight.requires_grad());
  });
  ASSERT_EQ(states[0].size(), 2u + 2u + 3u);  // fc w,b; bn w,b; mean, var, count
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < states[r].size(); ++i) {
      EXPECT_TRUE(torch::equal(states[r][i], states[2][i])) << "rank " << r << " tensor " << i;
    }
  }
}

TEST_F(TorchCollectives, ProcessSetsOnEveryOperationAndTheOptimizer) {
  spawn(3, [&](int rank, kolo::Engine& engine) {
    kt::Context ctx(engine);
    const kt::ProcessSet ps = ctx.add_process_set({2, 0});
    EXPECT_EQ(ps.id(), 1);
    EXPECT_FALSE(ctx.remove_process_set(kt::global_process_set));
    const kolo::ProcessSetInfo info = ctx.process_set_info(ps);
    EXPECT_EQ(info.included(), rank != 1);
    // The optimizer is built on every rank; rank 1 (outside) steps alone.
    auto model = torch::nn::Linear(2, 1);
    {
      torch::NoGradGuard guard;
      model->weight.fill_(1.0);
      model->bias.fill_(0.0);
    }
    auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                   torch::optim::SGDOptions(1.0));
    kt::DistributedOptimizerOptions options;
    options.process_set = ps;
    kt::DistributedOptimizer opt(sgd, model->named_parameters(), options, ctx);
    const float x = static_cast<float>((rank + 1) * (rank + 1));
    model->forward(torch::full({1, 2}, x)).sum().backward();
    opt.step();
    // d/dweight = x: on ranks 0 and 2 the average of 1 and 9, on rank 1
    // (outside the set) its own 4.
    EXPECT_FLOAT_EQ(model->weight[0][0].item<float>(), rank == 1 ? -3.0f : -4.0f)
        << "rank " << rank;
    if (rank == 1) {
      expectThrowContaining([&] { ctx.allreduce(torch::ones({1}), kt::Sum, "x", 1.0, 1.0, ps); },
                            "not a member of process set 1 (ranks 0,2)");
      ctx.barrier();
      return;
    }
    const int me = rank / 2;  // rank within {0, 2}
    at::Tensor r = torch::full({2}, static_cast<float>(rank));
    EXPECT_EQ(ctx.allreduce(r, kt::Sum, "", 1.0, 1.0, ps)[0].item<float>(), 2.0f);
    // Unnamed operations are counted per set.
    EXPECT_EQ(ctx.name_or_next("", "allreduce", ps), "noname.allreduce.ps1.1");
    auto gathered = ctx.grouped_allgather(
        {torch::full({rank + 1}, static_cast<float>(rank)), torch::ones({1, 2})}, "gag",
        ps);
    EXPECT_TRUE(torch::equal(gathered[0], torch::tensor({0.0f, 2.0f, 2.0f, 2.0f})));
    EXPECT_EQ(gathered[1].sizes(), (std::vector<int64_t>{2, 2}));
    auto h = ctx.allgather_async(torch::full({rank + 1}, 1.0f), "ag.rows", ps);
    h.wait();
    EXPECT_EQ(h.received_splits(), (std::vector<int64_t>{1, 3}));
    auto scattered = ctx.grouped_reducescatter({torch::ones({4}), torch::ones({3, 2})},
                                               kt::Sum, "grs", 1.0, 1.0, ps);
    EXPECT_TRUE(torch::equal(scattered[0], torch::full({2}, 2.0f)));
    EXPECT_EQ(scattered[1].size(0), me == 0 ? 2 : 1);
    at::Tensor b = ctx.broadcast(r, 2, "bc", ps);
    EXPECT_TRUE(torch::equal(b, torch::full({2}, 2.0f)));
    auto a2a = ctx.alltoall(torch::tensor({10.0f * rank, 10.0f * rank + 1}), {1, 1}, "a2a", ps);
    EXPECT_TRUE(torch::equal(a2a.tensor, torch::tensor({static_cast<float>(me), 20.0f + me})));
    EXPECT_EQ(ctx.broadcast_object(rank == 2 ? "from 2" : "", 2, "obj", ps), "from 2");
    ctx.barrier(ps);
    const int last = ctx.join(ps);
    EXPECT_TRUE(last == 0 || last == 2) << last;
    ctx.barrier();
  });
}

}  // namespace
