// ProcessGroupKolo's collectives: each c10d call as engine operations.
//
// All of them name their call the way torch.distributed's Python API does
// ("all_reduce(op=SUM)"), so that a mismatch reads as the program wrote it.
// Calls kolo's engine has no operation for are compositions: reduce is an
// allreduce into a scratch buffer on the other ranks; gather and scatter
// are alltoalls with one sender or one receiver; the bitwise reductions an
// allgather folded locally; barrier a one-byte allreduce.
#include <ATen/ATen.h>

#include <utility>

#include "c10d_call.h"
#include "c10d_work.h"
#include "tensor_util.h"

namespace kolo::torch {

using detail::C10dCall;
using detail::realView;
using OpType = ::c10d::OpType;

namespace {

// What a c10d ReduceOp becomes: kolo's reduce op and prescale, or a bitwise
// fold of the gathered tensors.
struct Reduction {
  enum class Bitwise { kNone, kAnd, kOr, kXor };
  kolo::ReduceOp op = kolo::ReduceOp::kSum;
  double prescale = 1.0;
  Bitwise bitwise = Bitwise::kNone;
  std::string name;  // "SUM"
};

Reduction reduction(const ::c10d::ReduceOp& op, const at::Tensor& tensor, const std::string& what) {
  Reduction r;
  r.name = detail::reduceOpName(op);
  const bool integral = at::isIntegralType(tensor.scalar_type(), /*includeBool=*/true);
  const bool isBool = tensor.scalar_type() == at::kBool;
  if (tensor.is_complex()) {
    KOLO_CHECK_ARG(op.op_ == ::c10d::ReduceOp::SUM || op.op_ == ::c10d::ReduceOp::AVG ||
                       op.op_ == ::c10d::ReduceOp::PREMUL_SUM,
                   what + ": ReduceOp." + r.name +
                       " is not defined for complex tensors (use SUM, AVG or PREMUL_SUM)");
  }
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM: r.op = kolo::ReduceOp::kSum; break;
    case ::c10d::ReduceOp::AVG: r.op = kolo::ReduceOp::kAverage; break;
    case ::c10d::ReduceOp::PRODUCT: r.op = kolo::ReduceOp::kProduct; break;
    case ::c10d::ReduceOp::MIN: r.op = kolo::ReduceOp::kMin; break;
    case ::c10d::ReduceOp::MAX: r.op = kolo::ReduceOp::kMax; break;
    case ::c10d::ReduceOp::PREMUL_SUM:
      r.op = kolo::ReduceOp::kSum;
      r.prescale = detail::premulFactor(op, what);
      break;
    case ::c10d::ReduceOp::BAND:
    case ::c10d::ReduceOp::BOR:
    case ::c10d::ReduceOp::BXOR:
      KOLO_CHECK_ARG(integral, what + ": ReduceOp." + r.name + " needs an integer or bool "
                                      "tensor, got " + c10::toString(tensor.scalar_type()));
      // bool: AND is the minimum and OR the maximum.
      if (isBool && op.op_ == ::c10d::ReduceOp::BAND) {
        r.op = kolo::ReduceOp::kMin;
      } else if (isBool && op.op_ == ::c10d::ReduceOp::BOR) {
        r.op = kolo::ReduceOp::kMax;
      } else {
        r.bitwise = op.op_ == ::c10d::ReduceOp::BAND  ? Reduction::Bitwise::kAnd
                    : op.op_ == ::c10d::ReduceOp::BOR ? Reduction::Bitwise::kOr
                                                      : Reduction::Bitwise::kXor;
      }
      break;
    default:
      detail::notImplemented(what + ": ReduceOp." + r.name +
                             " is not supported by the kolo backend (use SUM, AVG, PRODUCT, MIN, "
                             "MAX, BAND, BOR, BXOR or PREMUL_SUM)");
  }
  return r;
}

// Rows of shape: the tensor as one row of a [1, *shape] tensor.
at::Tensor asRow(const at::Tensor& t) { return t.unsqueeze(0); }

// The whole allgather of rows folded with op into out (bitwise reductions).
void fold(const at::Tensor& gathered, Reduction::Bitwise op, at::Tensor out) {
  at::NoGradGuard noGrad;
  at::Tensor acc = gathered[0].clone();
  for (int64_t r = 1; r < gathered.size(0); ++r) {
    switch (op) {
      case Reduction::Bitwise::kAnd: acc.bitwise_and_(gathered[r]); break;
      case Reduction::Bitwise::kOr: acc.bitwise_or_(gathered[r]); break;
      case Reduction::Bitwise::kXor: acc.bitwise_xor_(gathered[r]); break;
      case Reduction::Bitwise::kNone: break;
    }
  }
  out.copy_(acc.view(out.sizes()));
}

// A reduction of target into target (allreduce; reduce on its root) or
// into nowhere (reduce on the other ranks: the input stays as it was).
void reduceInto(C10dCall& c, const at::Tensor& target, const Reduction& r, bool keepResult,
                int size, const std::string& what) {
  if (r.bitwise != Reduction::Bitwise::kNone) {
    at::Tensor input = asRow(target.contiguous());
    at::Tensor gathered = at::empty({size, target.numel()}, target.options());
    c.add(kolo::OpType::kAllgather, input, at::Tensor(), what);
    c.land(gathered);
    if (keepResult) {
      c.then([gathered, op = r.bitwise, target]() mutable { fold(gathered, op, target); });
    }
    return;
  }
  at::Tensor work = keepResult ? detail::inPlace(c, target) : target.contiguous();
  at::Tensor real = realView(work);
  at::Tensor out = keepResult ? real : at::empty_like(real);
  kolo::Request& q = c.add(kolo::OpType::kAllreduce, real, out, what);
  q.reduceOp = r.op;
  q.prescale = r.prescale;
}

}  // namespace

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::allreduce(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceOptions& opts) {
  const std::string call = std::string("all_reduce(op=") + detail::reduceOpName(opts.reduceOp) + ")";
  return run(call, OpType::ALLREDUCE, [&](C10dCall& c) {
    const at::Tensor& t = detail::single(tensors, call);
    detail::checkCallTensor(t, call);
    reduceInto(c, t, reduction(opts.reduceOp, t, call), true, getSize(), call);
    c.outputs = {t};
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  const std::string call =
      std::string("all_reduce_coalesced(op=") + detail::reduceOpName(opts.reduceOp) + ")";
  return run(call, OpType::ALLREDUCE_COALESCED, [&](C10dCall& c) {
    KOLO_CHECK_ARG(!tensors.empty(), call + ": no tensors");
    for (const at::Tensor& t : tensors) {
      detail::checkCallTensor(t, call);
      const Reduction r = reduction(opts.reduceOp, t, call);
      if (r.bitwise != Reduction::Bitwise::kNone) {
        detail::notImplemented(call + ": bitwise reductions of several tensors at once are not "
                                      "supported; all_reduce each tensor");
      }
      reduceInto(c, t, r, true, getSize(), call);
    }
    c.outputs = tensors;
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::reduce(std::vector<at::Tensor>& tensors,
                                                          const ::c10d::ReduceOptions& opts) {
  const std::string call = "reduce(dst=" + std::to_string(opts.rootRank) +
                           ", op=" + detail::reduceOpName(opts.reduceOp) + ")";
  return run(call, OpType::REDUCE, [&](C10dCall& c) {
    const at::Tensor& t = detail::single(tensors, call);
    detail::checkCallTensor(t, call);
    KOLO_CHECK_ARG(opts.rootRank >= 0 && opts.rootRank < getSize(),
                   call + ": dst " + std::to_string(opts.rootRank) + " is not a rank of the group");
    reduceInto(c, t, reduction(opts.reduceOp, t, call), opts.rootRank == getRank(), getSize(),
               call);
    c.outputs = {t};
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::broadcast(
    std::vector<at::Tensor>& tensors, const ::c10d::BroadcastOptions& opts) {
  const std::string call = "broadcast(src=" + std::to_string(opts.rootRank) + ")";
  return run(call, OpType::BROADCAST, [&](C10dCall& c) {
    const at::Tensor& t = detail::single(tensors, call);
    detail::checkCallTensor(t, call);
    KOLO_CHECK_ARG(opts.rootRank >= 0 && opts.rootRank < getSize(),
                   call + ": src " + std::to_string(opts.rootRank) + " is not a rank of the group");
    at::Tensor work = realView(detail::inPlace(c, t));
    c.add(kolo::OpType::kBroadcast, work, work, call).root =
        engineRank(static_cast<int>(opts.rootRank));
    c.outputs = {t};
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors, std::vector<at::Tensor>& inputTensors,
    const ::c10d::AllgatherOptions&) {
  const std::string call = "all_gather";
  return run(call, OpType::ALLGATHER, [&](C10dCall& c) {
    const at::Tensor& in = detail::single(inputTensors, call);
    detail::checkCallTensor(in, call);
    KOLO_CHECK_ARG(outputTensors.size() == 1 &&
                       static_cast<int>(outputTensors[0].size()) == getSize(),
                   call + ": expected one list of " + std::to_string(getSize()) +
                       " output tensors");
    detail::checkShapes(outputTensors[0], in.sizes(), call, "output tensor");
    at::Tensor gathered = at::empty({getSize(), in.numel()}, in.options());
    c.add(kolo::OpType::kAllgather, asRow(realView(in.contiguous())), at::Tensor(), call);
    c.land(realView(gathered));
    c.thenCopyRows(gathered, outputTensors[0]);
    c.outputs = outputTensors[0];
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::_allgather_base(
    at::Tensor& outputBuffer, at::Tensor& inputBuffer, const ::c10d::AllgatherOptions&) {
  const std::string call = "all_gather_into_tensor";
  return run(call, OpType::_ALLGATHER_BASE, [&](C10dCall& c) {
    detail::checkCallTensor(inputBuffer, call);
    detail::checkCallTensor(outputBuffer, call);
    KOLO_CHECK_ARG(outputBuffer.numel() == inputBuffer.numel() * getSize() &&
                       outputBuffer.scalar_type() == inputBuffer.scalar_type(),
                   call + ": the output must hold " + std::to_string(getSize()) + " x " +
                       std::to_string(inputBuffer.numel()) + " elements of the input's dtype, got " +
                       c10::toString(outputBuffer.scalar_type()) + c10::str(outputBuffer.sizes()));
    c.add(kolo::OpType::kAllgather, asRow(realView(inputBuffer.contiguous())), at::Tensor(), call);
    c.land(realView(outputBuffer));
    c.outputs = {outputBuffer};
  });
}

}  // namespace kolo::torch
