// ProcessGroupKolo's calls that move blocks between ranks: the coalesced
// allgathers, gather, scatter, the reduce-scatters, the all-to-alls and
// barrier (see c10d_collectives.cc for how calls become operations).
#include <ATen/ATen.h>

#include <numeric>
#include <utility>

#include "c10d_call.h"
#include "c10d_work.h"

namespace kolo::torch {

using detail::C10dCall;
using detail::realView;
using OpType = ::c10d::OpType;

namespace {

// kolo's reduce op for a reduce-scatter (no bitwise ones), and its prescale.
kolo::ReduceOp scatterOp(const ::c10d::ReduceOp& op, const std::string& what, double* prescale) {
  *prescale = 1.0;
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM: return kolo::ReduceOp::kSum;
    case ::c10d::ReduceOp::AVG: return kolo::ReduceOp::kAverage;
    case ::c10d::ReduceOp::PRODUCT: return kolo::ReduceOp::kProduct;
    case ::c10d::ReduceOp::MIN: return kolo::ReduceOp::kMin;
    case ::c10d::ReduceOp::MAX: return kolo::ReduceOp::kMax;
    case ::c10d::ReduceOp::PREMUL_SUM:
      *prescale = detail::premulFactor(op, what);
      return kolo::ReduceOp::kSum;
    default:
      detail::notImplemented(what + ": this ReduceOp is not supported in a reduce-scatter by the "
                                    "kolo backend (use SUM, AVG, PRODUCT, MIN, MAX or PREMUL_SUM)");
  }
}

std::vector<int64_t> withRows(int64_t rows, at::IntArrayRef shape) {
  std::vector<int64_t> out{rows};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

// One of n one-row blocks: 1 at index, 0 elsewhere.
std::vector<int64_t> oneAt(int n, int64_t index) {
  std::vector<int64_t> v(static_cast<size_t>(n), 0);
  v[static_cast<size_t>(index)] = 1;
  return v;
}

// Adds a reduce-scatter of input (size blocks of output's shape) into output.
void addReduceScatter(C10dCall& c, const at::Tensor& input, const at::Tensor& output,
                      const ::c10d::ReduceOp& op, int size, const std::string& what) {
  detail::checkCallTensor(input, what);
  detail::checkCallTensor(output, what);
  KOLO_CHECK_ARG(input.numel() == output.numel() * size &&
                     input.scalar_type() == output.scalar_type(),
                 what + ": the input must hold " + std::to_string(size) + " x " +
                     std::to_string(output.numel()) + " elements of the output's dtype, got " +
                     c10::toString(input.scalar_type()) + c10::str(input.sizes()));
  double prescale = 1.0;
  const kolo::ReduceOp kop = scatterOp(op, what, &prescale);
  KOLO_CHECK_ARG(!input.is_complex() || kop == kolo::ReduceOp::kSum ||
                     kop == kolo::ReduceOp::kAverage,
                 what + ": complex tensors reduce with SUM, AVG or PREMUL_SUM only");
  at::Tensor in = realView(input.contiguous()).view(withRows(size, realView(output).sizes()));
  kolo::Request& q = c.add(kolo::OpType::kReducescatter, in, at::Tensor(), what);
  q.reduceOp = kop;
  q.prescale = prescale;
  c.land(realView(output));
}

}  // namespace

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists, std::vector<at::Tensor>& inputTensors,
    const ::c10d::AllgatherOptions&) {
  const std::string call = "all_gather_coalesced";
  const size_t inputs = inputTensors.size();
  return run(call, OpType::ALLGATHER_COALESCED, [&](C10dCall& c) {
    KOLO_CHECK_ARG(inputs > 0, call + ": needs at least one input tensor");
    KOLO_CHECK_ARG(static_cast<int>(outputTensorLists.size()) == getSize(),
                   call + ": expected one list of outputs per rank (" +
                       std::to_string(getSize()) + "), each with one tensor per input, got " +
                       std::to_string(outputTensorLists.size()));
    for (size_t r = 0; r < outputTensorLists.size(); ++r) {
      KOLO_CHECK_ARG(outputTensorLists[r].size() == inputs,
                     call + ": output list " + std::to_string(r) + " needs one tensor per input (" +
                         std::to_string(inputs) + "), got " +
                         std::to_string(outputTensorLists[r].size()));
    }
    for (size_t i = 0; i < inputs; ++i) {
      const at::Tensor& in = inputTensors[i];
      detail::checkCallTensor(in, call);
      // Input i's block from each rank r lands in outputTensorLists[r][i].
      std::vector<at::Tensor> blocks;
      for (size_t r = 0; r < outputTensorLists.size(); ++r) {
        const at::Tensor& out = outputTensorLists[r][i];
        const std::string where = "output_tensor_lists[" + std::to_string(r) + "][" +
                                  std::to_string(i) + "]";
        detail::checkCallTensor(out, call);
        KOLO_CHECK_ARG(out.sizes() == in.sizes() && out.scalar_type() == in.scalar_type(),
                       call + ": " + where + " is " + c10::toString(out.scalar_type()) +
                           c10::str(out.sizes()) + ", expected input " + std::to_string(i) +
                           "'s " + c10::toString(in.scalar_type()) + c10::str(in.sizes()));
        blocks.push_back(out);
      }
      at::Tensor gathered = at::empty({getSize(), in.numel()}, in.options());
      c.add(kolo::OpType::kAllgather, realView(in.contiguous()).unsqueeze(0), at::Tensor(), call);
      c.land(realView(gathered));
      c.thenCopyRows(gathered, blocks);
    }
    for (const auto& list : outputTensorLists) {
      c.outputs.insert(c.outputs.end(), list.begin(), list.end());
    }
  });
}

#if TORCH_VERSION_MAJOR >= 2
c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions&) {
  const std::string call = "all_gather_into_tensor_coalesced";
  return run(call, OpType::COALESCED, [&](C10dCall& c) {
    KOLO_CHECK_ARG(!inputs.empty() && outputs.size() == inputs.size(),
                   call + ": expected one output per input tensor");
    for (size_t i = 0; i < inputs.size(); ++i) {
      detail::checkCallTensor(inputs[i], call);
      detail::checkCallTensor(outputs[i], call);
      KOLO_CHECK_ARG(outputs[i].numel() == inputs[i].numel() * getSize() &&
                         outputs[i].scalar_type() == inputs[i].scalar_type(),
                     call + ": output " + std::to_string(i) + " must hold " +
                         std::to_string(getSize()) + " x " + std::to_string(inputs[i].numel()) +
                         " elements of its input's dtype");
      c.add(kolo::OpType::kAllgather, realView(inputs[i].contiguous()).unsqueeze(0), at::Tensor(),
            call);
      c.land(realView(outputs[i]));
    }
    c.outputs = outputs;
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  const char* op = detail::reduceOpName(opts.reduceOp);
  const std::string call =
      std::string("reduce_scatter_tensor_coalesced(op=") + op + ")";
  return run(call, OpType::COALESCED, [&](C10dCall& c) {
    KOLO_CHECK_ARG(!inputs.empty() && outputs.size() == inputs.size(),
                   call + ": expected one output per input tensor");
    for (size_t i = 0; i < inputs.size(); ++i) {
      addReduceScatter(c, inputs[i], outputs[i], opts.reduceOp, getSize(), call);
    }
    c.outputs = outputs;
  });
}
#endif

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::gather(
    std::vector<std::vector<at::Tensor>>& outputTensors, std::vector<at::Tensor>& inputTensors,
    const ::c10d::GatherOptions& opts) {
  const int64_t root = opts.rootRank;
  const std::string call = "gather(dst=" + std::to_string(root) + ")";
  return run(call, OpType::GATHER, [&](C10dCall& c) {
    const at::Tensor& in = detail::single(inputTensors, call);
    detail::checkCallTensor(in, call);
    KOLO_CHECK_ARG(root >= 0 && root < getSize(),
                   call + ": dst " + std::to_string(root) + " is not a rank of the group");
    const bool isRoot = root == getRank();
    if (isRoot) {
      KOLO_CHECK_ARG(outputTensors.size() == 1 &&
                         static_cast<int>(outputTensors[0].size()) == getSize(),
                     call + ": the destination needs one list of " + std::to_string(getSize()) +
                         " output tensors");
      detail::checkShapes(outputTensors[0], in.sizes(), call, "output tensor");
    } else {
      KOLO_CHECK_ARG(outputTensors.empty() || (outputTensors.size() == 1 && outputTensors[0].empty()),
                     call + ": only the destination rank passes output tensors");
    }
    // An alltoall in which every rank sends its one row to the root.
    at::Tensor row = realView(in.contiguous()).unsqueeze(0);
    kolo::Request& q = c.add(kolo::OpType::kAlltoall, row, at::Tensor(), call);
    q.splits = oneAt(getSize(), root);
    q.recvSplits = isRoot ? std::vector<int64_t>(getSize(), 1) : std::vector<int64_t>(getSize(), 0);
    at::Tensor gathered = at::empty({isRoot ? getSize() : 0, in.numel()}, in.options());
    c.land(realView(gathered));
    if (isRoot) {
      c.thenCopyRows(gathered, outputTensors[0]);
      c.outputs = outputTensors[0];
    }
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::scatter(
    std::vector<at::Tensor>& outputTensors, std::vector<std::vector<at::Tensor>>& inputTensors,
    const ::c10d::ScatterOptions& opts) {
  const int64_t root = opts.rootRank;
  const std::string call = "scatter(src=" + std::to_string(root) + ")";
  return run(call, OpType::SCATTER, [&](C10dCall& c) {
    const at::Tensor& out = detail::single(outputTensors, call);
    detail::checkCallTensor(out, call);
    KOLO_CHECK_ARG(root >= 0 && root < getSize(),
                   call + ": src " + std::to_string(root) + " is not a rank of the group");
    const bool isRoot = root == getRank();
    // An alltoall in which the root sends one row to every rank.
    at::Tensor rows;
    if (isRoot) {
      KOLO_CHECK_ARG(inputTensors.size() == 1 &&
                         static_cast<int>(inputTensors[0].size()) == getSize(),
                     call + ": the source needs one list of " + std::to_string(getSize()) +
                         " input tensors");
      detail::checkShapes(inputTensors[0], out.sizes(), call, "input tensor");
      rows = at::stack(inputTensors[0]);
    } else {
      KOLO_CHECK_ARG(inputTensors.empty() || (inputTensors.size() == 1 && inputTensors[0].empty()),
                     call + ": only the source rank passes input tensors");
      rows = at::empty(withRows(0, out.sizes()), out.options());
    }
    kolo::Request& q = c.add(kolo::OpType::kAlltoall, realView(rows), at::Tensor(), call);
    q.splits = isRoot ? std::vector<int64_t>(getSize(), 1) : std::vector<int64_t>(getSize(), 0);
    q.recvSplits = oneAt(getSize(), root);
    c.land(realView(out));
    c.outputs = {out};
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::reduce_scatter(
    std::vector<at::Tensor>& outputTensors, std::vector<std::vector<at::Tensor>>& inputTensors,
    const ::c10d::ReduceScatterOptions& opts) {
  const char* op = detail::reduceOpName(opts.reduceOp);
  const std::string call = std::string("reduce_scatter(op=") + op + ")";
  return run(call, OpType::REDUCE_SCATTER, [&](C10dCall& c) {
    const at::Tensor& out = detail::single(outputTensors, call);
    detail::checkCallTensor(out, call);
    KOLO_CHECK_ARG(inputTensors.size() == 1 &&
                       static_cast<int>(inputTensors[0].size()) == getSize(),
                   call + ": expected one list of " + std::to_string(getSize()) + " input tensors");
    detail::checkShapes(inputTensors[0], out.sizes(), call, "input tensor");
    addReduceScatter(c, at::stack(inputTensors[0]), out, opts.reduceOp, getSize(), call);
    c.outputs = {out};
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::_reduce_scatter_base(
    at::Tensor& outputBuffer, at::Tensor& inputBuffer, const ::c10d::ReduceScatterOptions& opts) {
  const char* op = detail::reduceOpName(opts.reduceOp);
  const std::string call = std::string("reduce_scatter_tensor(op=") + op + ")";
  return run(call, OpType::_REDUCE_SCATTER_BASE, [&](C10dCall& c) {
    addReduceScatter(c, inputBuffer, outputBuffer, opts.reduceOp, getSize(), call);
    c.outputs = {outputBuffer};
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::alltoall_base(
    at::Tensor& outputBuffer, at::Tensor& inputBuffer, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const ::c10d::AllToAllOptions&) {
  const std::string call = "all_to_all_single";
  return run(call, OpType::ALLTOALL_BASE, [&](C10dCall& c) {
    detail::checkCallTensor(inputBuffer, call);
    detail::checkCallTensor(outputBuffer, call);
    KOLO_CHECK_ARG(inputBuffer.dim() >= 1 && outputBuffer.dim() >= 1 &&
                       inputBuffer.scalar_type() == outputBuffer.scalar_type() &&
                       inputBuffer.sizes().slice(1) == outputBuffer.sizes().slice(1),
                   call + ": input " + c10::toString(inputBuffer.scalar_type()) +
                       c10::str(inputBuffer.sizes()) + " and output " +
                       c10::toString(outputBuffer.scalar_type()) + c10::str(outputBuffer.sizes()) +
                       " must have one dtype and the same shape but for the first dimension");
    auto splits = [&](std::vector<int64_t> given, int64_t rows, const char* which) {
      if (given.empty()) {
        KOLO_CHECK_ARG(rows % getSize() == 0,
                       call + ": the " + which + " has " + std::to_string(rows) +
                           " rows, which do not split evenly among " + std::to_string(getSize()) +
                           " ranks; pass " + which + "_split_sizes");
        return std::vector<int64_t>(getSize(), rows / getSize());
      }
      KOLO_CHECK_ARG(static_cast<int>(given.size()) == getSize(),
                     call + ": " + which + "_split_sizes has " + std::to_string(given.size()) +
                         " entries for " + std::to_string(getSize()) + " ranks");
      const int64_t sum = std::accumulate(given.begin(), given.end(), int64_t{0});
      KOLO_CHECK_ARG(sum == rows, call + ": " + which + "_split_sizes add up to " +
                                      std::to_string(sum) + " rows but the " + which + " has " +
                                      std::to_string(rows));
      return given;
    };
    kolo::Request& q =
        c.add(kolo::OpType::kAlltoall, realView(inputBuffer.contiguous()), at::Tensor(), call);
    q.splits = splits(inputSplitSizes, inputBuffer.size(0), "input");
    q.recvSplits = splits(outputSplitSizes, outputBuffer.size(0), "output");
    c.land(realView(outputBuffer));
    c.outputs = {outputBuffer};
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::alltoall(std::vector<at::Tensor>& outputTensors,
                                                            std::vector<at::Tensor>& inputTensors,
                                                            const ::c10d::AllToAllOptions&) {
  const std::string call = "all_to_all";
  return run(call, OpType::ALLTOALL, [&](C10dCall& c) {
    KOLO_CHECK_ARG(static_cast<int>(inputTensors.size()) == getSize() &&
                       static_cast<int>(outputTensors.size()) == getSize(),
                   call + ": expected " + std::to_string(getSize()) +
                       " input and output tensors, one per rank");
    std::vector<int64_t> send, receive;
    std::vector<at::Tensor> flat;
    for (int r = 0; r < getSize(); ++r) {
      detail::checkCallTensor(inputTensors[r], call);
      detail::checkCallTensor(outputTensors[r], call);
      KOLO_CHECK_ARG(inputTensors[r].scalar_type() == inputTensors[0].scalar_type() &&
                         outputTensors[r].scalar_type() == inputTensors[0].scalar_type(),
                     call + ": every input and output tensor needs the same dtype");
      flat.push_back(realView(inputTensors[r].contiguous()).reshape({-1}));
      send.push_back(flat.back().numel());
      receive.push_back(realView(outputTensors[r]).numel());
    }
    kolo::Request& q = c.add(kolo::OpType::kAlltoall, at::cat(flat), at::Tensor(), call);
    q.splits = send;
    q.recvSplits = receive;
    const int64_t total = std::accumulate(receive.begin(), receive.end(), int64_t{0});
    at::Tensor received = at::empty({total}, realView(outputTensors[0]).options());
    c.land(received);
    std::vector<at::Tensor> outs = outputTensors;
    c.then([received, receive, outs]() mutable {
      at::NoGradGuard noGrad;
      int64_t offset = 0;
      for (size_t r = 0; r < outs.size(); ++r) {
        realView(outs[r]).copy_(
            received.narrow(0, offset, receive[r]).view(realView(outs[r]).sizes()));
        offset += receive[r];
      }
    });
    c.outputs = outs;
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::barrier(const ::c10d::BarrierOptions&) {
  const std::string call = "barrier";
  return run(call, OpType::BARRIER, [&](C10dCall& c) {
    at::Tensor byte = at::zeros({1}, at::kByte);
    c.add(kolo::OpType::kAllreduce, byte, byte, call);
  });
}

}  // namespace kolo::torch
