// ProcessGroupKolo's send and recv: the engine's point-to-point messages
// (Engine::send, Engine::recv), CUDA tensors staged through host memory.
#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "c10d_call.h"
#include "c10d_work.h"
#include "tensor_util.h"

namespace kolo::torch {

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::send(std::vector<at::Tensor>& tensors,
                                                        int dstRank, int tag) {
  return pointToPoint(tensors, dstRank, tag, true);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::recv(std::vector<at::Tensor>& tensors,
                                                        int srcRank, int tag) {
  return pointToPoint(tensors, srcRank, tag, false);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int tag) {
  return pointToPoint(tensors, kolo::Engine::kAnySource, tag, false);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::pointToPoint(std::vector<at::Tensor>& tensors,
                                                                int peer, int tag, bool sending) {
  const bool anySource = peer == kolo::Engine::kAnySource;
  const std::string call = std::string(sending ? "send(dst=" : "recv(src=") +
                           (anySource ? std::string("None") : std::to_string(peer)) +
                           ", tag=" + std::to_string(tag) + ")";
  try {
    const at::Tensor& t = detail::single(tensors, call);
    detail::checkCallTensor(t, call);
    KOLO_CHECK_ARG(anySource || (peer >= 0 && peer < getSize() && peer != getRank()),
                   call + ": " + std::to_string(peer) + " is not another rank of the group (size " +
                       std::to_string(getSize()) + ", this rank " + std::to_string(getRank()) +
                       ")");
    KOLO_CHECK_ARG(tag >= 0, call + ": a tag is 0 or more");
    KOLO_CHECK_ARG(tagLimit_ == 0 || tag < tagLimit_,
                   call + ": tags on the process's kolo engine are below " +
                       std::to_string(tagLimit_) +
                       " (every group there has a range of tags of its own); pass a smaller tag");
    detail::C10dCall c;
    // The engine's messages are CPU memory: a CUDA tensor goes through a
    // host copy (taken now for a send, copied back by finish for a recv).
    const bool staged = t.is_cuda();
    at::Tensor buffer;
    if (sending) {
      buffer = (staged ? t.to(at::kCPU) : t).contiguous();
    } else if (staged) {
      buffer = at::empty(t.sizes(), t.options().device(at::kCPU));
      c.then([t, buffer]() mutable {
        at::NoGradGuard noGrad;
        t.copy_(buffer);
      });
    } else {
      buffer = detail::inPlace(c, t);
    }
    at::Tensor moved = detail::realView(buffer);
    kolo::Request q;
    detail::describeTensor(moved, call, q);
    kolo::Entry e;
    e.input = moved.data_ptr();
    e.output = moved.data_ptr();
    auto work = c10::make_intrusive<WorkKolo>(
        getRank(),
        sending ? ::c10d::OpType::SEND
                : (anySource ? ::c10d::OpType::RECVANYSOURCE : ::c10d::OpType::RECV),
        label_, label_ + " " + call, staged ? at::Device(at::kCPU) : t.device(),
        staged ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{t}, std::move(c.finish));
    work->keep({t, moved});
    work->expect(1);
    if (!sending) work->receivesFrom(engineRanks_);
    e.onDone = WorkKolo::doneCallback(work);
    const int enginePeer = anySource ? kolo::Engine::kAnySource : engineRank(peer);
    kolo::Handle h = sending
                         ? engine_->send(enginePeer, tagBase_ + tag, std::move(q), std::move(e))
                         : engine_->recv(enginePeer, tagBase_ + tag, std::move(q), std::move(e));
    work->started({std::move(h)});
    return work;
  } catch (...) {
    detail::rethrowAsTorch(label_);
  }
}

}  // namespace kolo::torch
