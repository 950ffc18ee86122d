// Tensor fusion: which negotiated responses share one fusion buffer (the
// coordinator's decision, the same on every rank). The buffer itself is
// execution/fusion_buffer.h; where each tensor lies in it, comm/layout.h.
#pragma once

#include <cstdint>
#include <vector>

#include "wire/message.h"

namespace kolo {

// CPU tensors of at least this many bytes are not fused: they are reduced in
// place, on their own. Copying a tensor into the fusion buffer and back costs
// two memcpy passes (~10 GB/s here) to save one backend call (~20-100 us);
// from about 1 MiB on the copies cost more than the call, and on Gloo or MPI
// (1-4 GB/s) they would add 15-40% to the reduction itself.
//
// CUDA tensors fuse whatever their size. The pack kernel copies at device
// memory bandwidth (TB/s: well under a millisecond for all of ResNet-50's
// 97.5 MiB of gradients), while every response costs the host a collective
// launch, an event and a completion, which is what bounds a step on a fast
// GPU. So a step's gradients go in as few responses as the threshold allows.
constexpr int64_t kUnfusedTensorBytes = int64_t(1) << 20;

// Merges compatible allreduce responses (same dtype, device, reduce op and
// scales) into fused responses of at most thresholdBytes each, keeping the
// first-seen order of each fusion key: CPU responses smaller than
// kUnfusedTensorBytes, and CUDA responses of any size, counted as their
// fusedBytes in a buffer laid out by fusionLayout (comm/layout.h), so
// the fused buffer never exceeds the threshold. A response larger than the
// threshold stays alone. Deterministic: every rank computing this on the
// same input gets the same output. thresholdBytes 0 disables.
std::vector<Response> fuseResponses(std::vector<Response> responses,
                                    int64_t thresholdBytes);

// The same fusion of responses owned elsewhere (the response cache): copies
// each tensor's name and shape once into the fused responses, instead of
// copying whole responses first.
std::vector<Response> fuseResponses(const std::vector<const Response*>& responses,
                                    int64_t thresholdBytes);

}  // namespace kolo
