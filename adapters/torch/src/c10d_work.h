// The Work of a kolo process group's call, and how kolo's errors become
// torch's.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "kolo/completion_runner.h"
#include "kolo/error.h"
#include "kolo/torch/c10d.h"

namespace kolo::torch::detail {

// The exception torch raises for a failed call: c10::ValueError for a bad
// argument, c10::DistBackendError (torch 2.x; c10::Error in 1.13) for
// everything else. The message is kolo's, prefixed with label ("process
// group 0") unless it names the group already.
std::exception_ptr torchError(const kolo::Status& status, const std::string& label);
// The same for an exception thrown at the call (kolo::Error, or anything
// else as an internal error); torch's own exceptions pass through.
[[noreturn]] void rethrowAsTorch(const std::string& label);

// The process's runner of futures' completions (kolo::CompletionRunner):
// futures complete there, never on an engine's thread, since their
// callbacks run inline and may wait on other futures (DDP's PowerSGD hook
// does). Any thread; never destroyed (its threads may run at exit).
kolo::CompletionRunner& completionRunner();

}  // namespace kolo::torch::detail

namespace kolo::torch {

// A call's completion: as many engine operations as the call made (one; a
// coalesced call one per tensor), counted down by their Entry::onDone, and
// a finishing step (copies into the caller's output tensors) run once,
// after them, by whichever reader comes first.
class ProcessGroupKolo::WorkKolo : public ::c10d::Work {
 public:
  // label: the group's, for messages; name: the call's ("process group 0
  // #54"); device: where the tensors live; outputs: result() and the
  // future's value; finish: runs once every operation is done (or, for CUDA
  // tensors, enqueued, on a stream that then waits for them: the caller's
  // in wait(), a pool stream for the future).
  WorkKolo(int rank, ::c10d::OpType type, std::string label, std::string name,
           at::Device device, std::vector<at::Tensor> outputs, std::function<void()> finish);

  // The Entry::onDone of each of the work's operations (ops of them).
  static std::function<void(const kolo::Status&)> doneCallback(
      c10::intrusive_ptr<WorkKolo> work);
  // Submission: the handles of the work's operations, or why it failed.
  void started(std::vector<kolo::Handle> handles);
  void failedToStart(const kolo::Status& why);
  // Tensors to keep alive as long as the work (inputs, staging buffers).
  void keep(std::vector<at::Tensor> tensors);
  // Events the engine's comm stream waits on (Entry::readyEvent), kept alive
  // with the work.
  void keepReady(std::shared_ptr<void> event);
  // Operations the work is made of; set before the first is submitted.
  void expect(int operations);
  // A receive: sourceRank() is the group rank whose engine rank (in
  // engineRanks, the engine's rank of each group rank) sent the message.
  void receivesFrom(std::vector<int> engineRanks);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // A receive's sender (group rank), once done; -1 before.
  int sourceRank() const override;

 private:
  void opDone(const kolo::Status& status);
  // Waits until started() or failedToStart() (false when timeout, if not
  // zero, ran out first).
  bool waitStarted(std::chrono::milliseconds timeout);
  // Runs finish_ once (or records the operations' first error).
  void finishOnce();
  // Completes the future on a CompletionRunner thread (completeFuture).
  void postFuture();
  void completeFuture();

  const std::string label_;
  const std::string name_;
  const at::Device device_;
  const std::vector<at::Tensor> outputs_;
  const std::function<void()> finish_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  std::vector<kolo::Handle> handles_;
  int remaining_ = 0;          // operations not done yet
  kolo::Status firstError_;    // of the operations (or of starting)
  bool futureWanted_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::vector<at::Tensor> kept_;
  std::vector<std::shared_ptr<void>> readyEvents_;
  std::vector<int> sourceRanks_;  // receivesFrom()

  std::mutex finishMu_;        // held while finish_ runs
  bool finished_ = false;      // under mu_ and finishMu_
  std::exception_ptr error_;   // set once finished_
};

}  // namespace kolo::torch
