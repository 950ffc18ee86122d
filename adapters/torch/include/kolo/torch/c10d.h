/// \file
/// kolo under torch.distributed: a c10d backend over kolo's engine, so that
/// DDP, FSDP and any program written against c10d's process groups run on
/// kolo (shared memory, Gloo or MPI for CPU tensors, NCCL for CUDA ones).
///
/// Python registers it as "kolo" (`import kolo.torch.distributed`); C++
/// programs create it directly:
///
/// \code
/// #include <kolo/torch/c10d.h>
/// auto pg = kolo::torch::ProcessGroupKolo::createProcessGroupKolo();
/// std::vector<at::Tensor> tensors = {grad};
/// pg->allreduce(tensors)->wait();
/// \endcode
///
/// What kolo adds over gloo and nccl: every call is negotiated, so ranks
/// that make different calls at the same point (another op, dtype, shape,
/// root or split sizes) get an error at that call naming both calls and the
/// ranks on each side, and a rank that never makes a call is named by the
/// stall inspector (KOLO_STALL_CHECK_TIME) and, at the group's timeout, in
/// every rank's error.
#pragma once

#include <torch/version.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "kolo/engine.h"
#include "kolo/store.h"
#include "kolo/tcp_store.h"

namespace kolo::torch {

/// The class c10d backends derive from: c10d::Backend in torch 2.x,
/// c10d::ProcessGroup in torch 1.13.
#if TORCH_VERSION_MAJOR >= 2
using C10dBackend = ::c10d::Backend;
#else
using C10dBackend = ::c10d::ProcessGroup;
#endif

namespace detail {
struct C10dCall;
}  // namespace detail

/// What a kolo process group needs besides its rank and size.
struct ProcessGroupKoloOptions {
  /// The group's timeout (init_process_group(timeout=...)): a call that some
  /// ranks have not made for this long fails on every rank with an error
  /// naming them. Also bounds rendezvous and a silent peer (with
  /// KOLO_TIMEOUT, whichever is shorter).
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  /// torch's name of the group ("0" for the default group); messages and
  /// the timeline name the group by it.
  std::string groupName = "0";
  /// The global rank of each rank of the group, in group order; empty: the
  /// group is the whole world. Messages name ranks by their group rank and
  /// say which global ranks those are.
  std::vector<int64_t> globalRanks;
};

/// A c10d process group (torch 2.x: a backend of one) whose every call is an
/// operation of kolo's engine. One engine per process: the default group
/// (groupName "0", as torch names it) makes it, meeting the other ranks through the store it is
/// given (torch's store: env://, tcp://, file://, torchrun's), never through
/// a second rendezvous. Every later group of the process is a local process
/// set of that engine (Engine::addLocalProcessSet, keyed "c10d/<group
/// name>"), made by the group's members alone, so one loop thread runs every
/// group and all of a process's work is issued in one order its peers agree
/// on; each keeps its own timeout and stall times (kolo::ProcessSetLimits).
/// A group that cannot share it makes an engine of its own, as every group
/// did before: one whose ranks are not ascending, and any group made while
/// the default group is not kolo's.
///
/// Calls are named by the group and their place in it ("process group 0
/// #54"): every rank must make the same calls in the same order, as c10d
/// requires. Calls of one rank may come from several threads, but not
/// concurrently with each other in an order that differs between ranks.
///
/// Point-to-point calls (send, recv, recv from any source) are the engine's
/// (Engine::send, Engine::recv): messages between two ranks with one tag
/// match in the order they were made. On the process's engine every group
/// has a range of tags of its own, so tags are below 2^20 there; CUDA tensors
/// are staged through host memory (the core's messages are CPU memory).
///
/// Errors: a bad argument throws at the call (ValueError in Python); what is
/// not supported throws NotImplementedError naming what to use instead;
/// failures of the collective (ranks that made different calls, a peer that
/// died, a call not made in time) surface from Work::wait() as
/// c10::DistBackendError (torch 2.x; c10::Error in 1.13), with kolo's
/// message.
class ProcessGroupKolo : public C10dBackend {
 public:
  /// The Work of one call: wait(), isCompleted(), exception() and
  /// getFuture() behave as gloo's. Defined in c10d.cc.
  class WorkKolo;

  /// Meets the other ranks through torch's store (the one
  /// init_process_group or new_group passes); blocks until every rank of the
  /// group has arrived (bounded by options.timeout and KOLO_TIMEOUT).
  /// Reads the rest of its configuration from KOLO_* variables.
  ProcessGroupKolo(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                   ProcessGroupKoloOptions options = {});
  /// The same over a kolo store.
  ProcessGroupKolo(std::shared_ptr<kolo::Store> store, int rank, int size,
                   ProcessGroupKoloOptions options = {});
  /// createProcessGroupKolo's: over a kolo store, with the place of this
  /// process among the job's hosts known (identity), keeping server (the
  /// store this process serves under torchrun; may be null) alive.
  ProcessGroupKolo(std::shared_ptr<kolo::Store> store, const kolo::Identity& identity,
                   ProcessGroupKoloOptions options, std::unique_ptr<kolo::TcpStoreServer> server);
  /// shutdown(), errors swallowed (pending calls fail).
  ~ProcessGroupKolo() override;

  /// The group of every process of the job, from the launcher's environment
  /// as kolo::init() reads it (kolorun, mpirun, torchrun, Slurm): the
  /// counterpart of c10d::ProcessGroupMPI::createProcessGroupMPI(). Under
  /// kolorun it meets the others through kolorun's store; under torchrun
  /// (or with MASTER_ADDR/MASTER_PORT) rank 0 serves one. timeout: see
  /// ProcessGroupKoloOptions. Throws kolo::InvalidArgument for a malformed
  /// environment and kolo::Timeout when ranks do not arrive in time.
  static c10::intrusive_ptr<ProcessGroupKolo> createProcessGroupKolo(
      std::chrono::milliseconds timeout = std::chrono::minutes(30));

  /// "kolo".
  const std::string getBackendName() const override { return "kolo"; }

  /// dist.broadcast: root's tensor on every rank, in place.
  c10::intrusive_ptr<::c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const ::c10d::BroadcastOptions& opts = ::c10d::BroadcastOptions()) override;
  /// dist.all_reduce, in place: SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM, and BAND, BOR,
  /// BXOR of integer or bool tensors (an allgather folded locally).
  c10::intrusive_ptr<::c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const ::c10d::AllreduceOptions& opts = ::c10d::AllreduceOptions()) override;
  /// dist.all_reduce_coalesced: the tensors reduced as one negotiated unit.
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const ::c10d::AllreduceCoalescedOptions& opts =
          ::c10d::AllreduceCoalescedOptions()) override;
  /// dist.reduce: the result on opts.rootRank; the other ranks' tensors stay as they were.
  c10::intrusive_ptr<::c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const ::c10d::ReduceOptions& opts = ::c10d::ReduceOptions()) override;
  /// dist.all_gather: every rank's tensor into outputTensors[0][rank].
  c10::intrusive_ptr<::c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputTensors, std::vector<at::Tensor>& inputTensors,
      const ::c10d::AllgatherOptions& opts = ::c10d::AllgatherOptions()) override;
  /// dist.all_gather_into_tensor: every rank's input, in rank order, into outputBuffer.
  c10::intrusive_ptr<::c10d::Work> _allgather_base(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer,
      const ::c10d::AllgatherOptions& opts = ::c10d::AllgatherOptions()) override;
  /// dist.all_gather_coalesced: all_gather of several tensors, negotiated as one unit;
  /// outputTensorLists[r][i] receives rank r's inputTensors[i] (one list per rank, as gloo).
  c10::intrusive_ptr<::c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputTensorLists,
      std::vector<at::Tensor>& inputTensors,
      const ::c10d::AllgatherOptions& opts = ::c10d::AllgatherOptions()) override;
#if TORCH_VERSION_MAJOR >= 2
  /// all_gather_into_tensor of several tensors, negotiated as one unit (torch 2.x's
  /// _coalescing_manager; FSDP2).
  c10::intrusive_ptr<::c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts = ::c10d::AllgatherOptions()) override;
#endif
  /// dist.gather: every rank's tensor into the root's outputTensors[0].
  c10::intrusive_ptr<::c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputTensors, std::vector<at::Tensor>& inputTensors,
      const ::c10d::GatherOptions& opts = ::c10d::GatherOptions()) override;
  /// dist.scatter: the root's inputTensors[0][rank] into each rank's output.
  c10::intrusive_ptr<::c10d::Work> scatter(
      std::vector<at::Tensor>& outputTensors, std::vector<std::vector<at::Tensor>>& inputTensors,
      const ::c10d::ScatterOptions& opts = ::c10d::ScatterOptions()) override;
  /// dist.reduce_scatter: the reduction of every rank's inputTensors[0][rank] into rank's
  /// output.
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputTensors, std::vector<std::vector<at::Tensor>>& inputTensors,
      const ::c10d::ReduceScatterOptions& opts = ::c10d::ReduceScatterOptions()) override;
  /// dist.reduce_scatter_tensor: block rank of the reduction of inputBuffer into
  /// outputBuffer.
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer,
      const ::c10d::ReduceScatterOptions& opts = ::c10d::ReduceScatterOptions()) override;
#if TORCH_VERSION_MAJOR >= 2
  /// reduce_scatter_tensor of several tensors, negotiated as one unit (torch 2.x).
  c10::intrusive_ptr<::c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::ReduceScatterOptions& opts = ::c10d::ReduceScatterOptions()) override;
#endif
  /// dist.all_to_all_single: rows of inputBuffer to each rank (inputSplitSizes; empty: an
  /// even split), rows from each into outputBuffer (outputSplitSizes); ranks whose
  /// sizes do not pair up fail before anything moves.
  c10::intrusive_ptr<::c10d::Work> alltoall_base(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer, std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes,
      const ::c10d::AllToAllOptions& opts = ::c10d::AllToAllOptions()) override;
  /// dist.all_to_all: inputTensors[r] to rank r, outputTensors[r] from rank r.
  c10::intrusive_ptr<::c10d::Work> alltoall(
      std::vector<at::Tensor>& outputTensors, std::vector<at::Tensor>& inputTensors,
      const ::c10d::AllToAllOptions& opts = ::c10d::AllToAllOptions()) override;
  /// dist.send / isend to dstRank: completes when dstRank received it.
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                        int tag) override;
  /// dist.recv / irecv from srcRank.
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                        int tag) override;
  /// dist.recv without src: the first message with tag from any rank of
  /// the group; the work's sourceRank() is the sender's group rank.
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                                 int tag) override;
  /// dist.barrier: completes when every rank of the group called it.
  c10::intrusive_ptr<::c10d::Work> barrier(
      const ::c10d::BarrierOptions& opts = ::c10d::BarrierOptions()) override;

  /// Calls start at 0 on every rank: nothing to agree on.
  void setSequenceNumberForGroup() override;
  /// The number of calls this rank made in the group so far.
  uint64_t getSequenceNumberForGroup() override;

  /// Fails this rank: every rank's pending and later calls in this group, and
  /// in every group on the same engine, fail with an error naming this rank
  /// (as ProcessGroupMPI::abort() ends the job). Any thread.
#if TORCH_VERSION_MAJOR >= 2
  void abort() override;
#else
  void abort();
#endif
  /// Ends the group: removes its process set from the process's engine
  /// (blocking until every member did), or shuts the engine down when the
  /// group made it (the default group's ends every group on it); pending
  /// calls fail. Idempotent.
#if TORCH_VERSION_MAJOR >= 2
  void shutdown() override;
#else
  void shutdown();
#endif

  /// The engine the group's calls run on (its stats, its timeline).
  kolo::Engine& engine() { return *engine_; }
  /// The process set of engine() the group's calls carry (0: all its ranks).
  int processSet() const { return processSet_; }
  /// "process group 0" or "process group 1 (global ranks 2,3)".
  const std::string& label() const { return label_; }

 private:
  // Connects the engine; identity null: found through store.
  void start(std::shared_ptr<kolo::Store> store, const kolo::Identity* identity);
  // The next call's name ("process group 0 #54"); under mu_.
  std::string nextName();
  // A call: build fills in its operations (throwing for bad arguments),
  // then submit() names and enqueues them. Errors become torch's; a call
  // refused on this rank is still announced to the others (refuse()).
  c10::intrusive_ptr<::c10d::Work> run(const std::string& call, ::c10d::OpType type,
                                       const std::function<void(detail::C10dCall&)>& build);
  c10::intrusive_ptr<::c10d::Work> submit(detail::C10dCall& call);
  // Announces call, refused on this rank for why, as the group's next call:
  // a one-byte operation whose call differs from the other ranks' (unless
  // they refused it alike), so that they fail at it instead of waiting.
  void refuse(const std::string& call, const std::string& why);
  void enqueueRefusal(const std::string& name, const std::string& call, const std::string& why);
  // send (sending), recv from peer, or recv from any source (peer < 0).
  c10::intrusive_ptr<::c10d::Work> pointToPoint(std::vector<at::Tensor>& tensors, int peer,
                                                int tag, bool sending);
  // The engine's rank of group rank r.
  int engineRank(int r) const { return engineRanks_[static_cast<size_t>(r)]; }

  ProcessGroupKoloOptions options_;
  std::unique_ptr<kolo::TcpStoreServer> server_;  // createProcessGroupKolo under torchrun
  std::string label_;
  kolo::Config config_;
  std::shared_ptr<kolo::Engine> engine_;  // shared by the groups on the process's engine
  bool ownsEngine_ = false;               // made it (shutdown() shuts it down)
  int processSet_ = 0;                    // the set the group's operations carry
  bool localSet_ = false;                 // processSet_ is a local set of a shared engine
  std::vector<int> engineRanks_;          // the engine's rank of each group rank
  int tagBase_ = 0;                       // added to tags on the engine
  int tagLimit_ = 0;                      // tags must be below it (0: no limit)
  std::once_flag shutdownOnce_;
  std::mutex mu_;      // orders name assignment and submission
  uint64_t seq_ = 0;   // calls made so far (under mu_)
};

}  // namespace kolo::torch
