#include "negotiation/message_table.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "common/ranks_text.h"

namespace kolo {
namespace {

std::string fmtScale(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string describeChange(const ProcessSetChange& c) {
  if (c.local()) {
    return std::string(c.localRemove ? "removal of" : "") + " local process set '" + c.localKey +
           "' of ranks " + bracketed(c.ranks);
  }
  if (c.ranks.empty()) return "removal of process set " + std::to_string(c.removeId);
  return "a process set of ranks " + bracketed(c.ranks);
}

// What an error about the request under name calls it: the name when the
// request came from another API's call (its name is then a sequence number
// such as "process group 0 #54"), "tensor 'name'" otherwise.
std::string subject(const std::string& name, const Request& q) {
  return q.call.empty() ? "tensor '" + name + "'" : name;
}

// Compares every submitted request against the lowest submitting rank's and
// describes the first disagreement ("" when all agree). ranks maps set
// ranks to job ranks for the message.
std::string findMismatch(const std::string& name,
                         const std::vector<std::optional<RequestMsg>>& perRank,
                         const std::vector<int>& ranks) {
  int first = -1;
  for (size_t r = 0; r < perRank.size(); ++r) {
    if (perRank[r]) {
      first = static_cast<int>(r);
      break;
    }
  }
  const Request& a = perRank[first]->request;
  const bool freeFirstDim = a.op == OpType::kAllgather || a.op == OpType::kAlltoall;
  for (size_t r = first + 1; r < perRank.size(); ++r) {
    if (!perRank[r]) continue;
    const Request& b = perRank[r]->request;
    auto differ = [&](const std::string& what, const std::string& va, const std::string& vb) {
      if (!a.call.empty() || !b.call.empty()) {
        // Calls of another API: each rank's whole call, as the program made it.
        return name + ": ranks made different calls (they differ in " + what + "): rank " +
               std::to_string(ranks[first]) + " called " + describeCall(a) + ", rank " +
               std::to_string(ranks[r]) + " called " + describeCall(b);
      }
      return "tensor '" + name + "': ranks disagree on " + what + ": rank " +
             std::to_string(ranks[first]) + " sent " + va + ", rank " + std::to_string(ranks[r]) +
             " sent " + vb;
    };
    if (a.call != b.call) return differ("the call", a.call, b.call);
    if (a.op != b.op) return differ("the operation", toString(a.op), toString(b.op));
    if (a.op == OpType::kProcessSet) {
      const ProcessSetChange& ca = perRank[first]->setChange;
      const ProcessSetChange& cb = perRank[r]->setChange;
      if (ca != cb && (ca.local() || cb.local())) {
        return "local process set '" + ca.localKey +
               "': its members disagree (every member must call add_local_process_set with "
               "the same key and ranks): rank " +
               std::to_string(ranks[first]) + " asked for" + describeChange(ca) + ", rank " +
               std::to_string(ranks[r]) + " for" + describeChange(cb);
      }
      if (ca != cb) {
        return "process set change #" + name.substr(name.rfind('.') + 1) +
               ": ranks disagree (every rank must call add_process_set/remove_process_set "
               "with the same arguments in the same order): rank " +
               std::to_string(ranks[first]) + " asked for " + describeChange(ca) + ", rank " +
               std::to_string(ranks[r]) + " for " + describeChange(cb);
      }
      continue;
    }
    if (a.dtype != b.dtype) {
      return differ("dtype", describe(a.dtype, a.shape), describe(b.dtype, b.shape));
    }
    if (a.device != b.device) {
      // Horovod's CPU/GPU mismatch: one rank's tensor is on the CPU,
      // another's on a GPU.
      return differ("the device (pass the tensor on the same kind of device on every rank)",
                    std::string("a ") + toString(a.device) + " tensor",
                    std::string("a ") + toString(b.device) + " tensor");
    }
    bool shapeOk;
    if (freeFirstDim) {
      shapeOk = a.shape.size() == b.shape.size() && !a.shape.empty() &&
                std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1);
    } else {
      shapeOk = a.shape == b.shape;
    }
    if (!shapeOk) {
      return differ(freeFirstDim ? "shape (all but the first dimension must match)" : "shape",
                    describe(a.dtype, a.shape), describe(b.dtype, b.shape));
    }
    if (a.op == OpType::kAllreduce || a.op == OpType::kReducescatter) {
      if (a.reduceOp != b.reduceOp) {
        return differ("the reduce op", toString(a.reduceOp), toString(b.reduceOp));
      }
      if (a.prescale != b.prescale) {
        return differ("prescale factor", fmtScale(a.prescale), fmtScale(b.prescale));
      }
      if (a.postscale != b.postscale) {
        return differ("postscale factor", fmtScale(a.postscale), fmtScale(b.postscale));
      }
    }
    if (a.op == OpType::kBroadcast && a.root != b.root) {
      return differ("root rank", std::to_string(ranks[a.root]), std::to_string(ranks[b.root]));
    }
    if (perRank[first]->group != perRank[r]->group) {
      return differ("group", "'" + perRank[first]->group + "'", "'" + perRank[r]->group + "'");
    }
  }
  return "";
}

}  // namespace

MessageTable::MessageTable(std::vector<int> ranks, std::string label)
    : size_(static_cast<int>(ranks.size())),
      ranks_(std::move(ranks)),
      label_(std::move(label)),
      joined_(size_, false) {}

Response MessageTable::error(const std::string& name, const std::string& message) const {
  Response r;
  r.kind = ResponseKind::kError;
  r.names = {name};
  r.error = label_.empty() ? message : label_ + ": " + message;
  return r;
}

void MessageTable::add(int rank, const RequestMsg& msg) {
  if (msg.request.op == OpType::kJoin) {
    if (!joined_[rank]) {
      joined_[rank] = true;
      joinOrder_.push_back(rank);
    }
    return;
  }
  Row& row = rows_[msg.request.name];
  if (row.perRank.empty()) {
    row.perRank.resize(size_);
    row.arrival = ++arrivals_;
    row.firstSeen = std::chrono::steady_clock::now();
  }
  row.perRank[rank] = msg;
}

std::string MessageTable::checkReceived(const std::string& name, const Row& row,
                                        const std::vector<int64_t>& sent) const {
  for (int j = 0; j < size_; ++j) {
    if (!row.perRank[j]) continue;
    const Request& receiver = row.perRank[j]->request;
    if (receiver.recvSplits.empty()) continue;
    for (int i = 0; i < size_; ++i) {
      const int64_t rows = sent[static_cast<size_t>(i) * size_ + j];
      if (receiver.recvSplits[i] == rows) continue;
      std::string message = subject(name, receiver) + ": rank " + std::to_string(ranks_[j]) +
                            " expects " + std::to_string(receiver.recvSplits[i]) +
                            " rows from rank " + std::to_string(ranks_[i]) + ", which sends " +
                            std::to_string(rows);
      if (row.perRank[i] && i != j) {
        message += ": rank " + std::to_string(ranks_[j]) + " called " + describeCall(receiver) +
                   ", rank " + std::to_string(ranks_[i]) + " called " +
                   describeCall(row.perRank[i]->request);
      }
      return message;
    }
  }
  return "";
}

// The members of the local process set a row changes (job ranks, which are
// set 0's ranks), or nullptr for any other row: such a row waits for its
// members alone, any other for every rank that has not joined.
const std::vector<int32_t>* MessageTable::localMembers(const Row& row) const {
  for (int r = 0; r < size_; ++r) {
    if (!row.perRank[r]) continue;
    const RequestMsg& m = *row.perRank[r];
    return m.request.op == OpType::kProcessSet && m.setChange.local() ? &m.setChange.ranks
                                                                      : nullptr;
  }
  return nullptr;
}

bool MessageTable::expected(const std::vector<int32_t>* members, int rank) const {
  if (members) return std::binary_search(members->begin(), members->end(), rank);
  return !joined_[rank];
}

bool MessageTable::readyRow(const Row& row) const {
  // A point-to-point message, and a pair's request to connect, need only
  // the rank that sent it.
  for (int r = 0; r < size_; ++r) {
    if (!row.perRank[r]) continue;
    const RequestMsg& m = *row.perRank[r];
    if (wire::isMessageName(m.request.name) || m.setChange.pairRequest) return true;
    break;
  }
  const std::vector<int32_t>* members = localMembers(row);
  bool any = false;
  for (int r = 0; r < size_; ++r) {
    if (row.perRank[r]) {
      any = true;
    } else if (expected(members, r)) {
      return false;
    }
  }
  return any;
}

Response MessageTable::buildResponse(const std::string& name, const Row& row) const {
  std::string mismatch = findMismatch(name, row.perRank, ranks_);
  if (!mismatch.empty()) return error(name, mismatch);
  int first = 0;
  while (!row.perRank[first]) ++first;
  const Request& q = row.perRank[first]->request;

  Response r;
  r.op = q.op;
  r.dtype = q.dtype;
  r.device = q.device;
  r.reduceOp = q.reduceOp;
  r.prescale = q.prescale;
  r.postscale = q.postscale;
  r.root = q.root;
  r.names = {name};
  r.shapes = {q.shape};
  r.setChange = row.perRank[first]->setChange;
  switch (q.op) {
    case OpType::kBroadcast:
      if (q.root < 0 || q.root >= size_) {
        return error(name, subject(name, q) + ": broadcast root " + std::to_string(q.root) +
                               " is not a rank (size " + std::to_string(size_) + ")");
      }
      if (!row.perRank[q.root]) {
        return error(name, subject(name, q) + ": broadcast root rank " +
                               std::to_string(ranks_[q.root]) + " has joined and has no data");
      }
      break;
    case OpType::kAllgather:
      // A joined rank contributes no rows.
      for (int i = 0; i < size_; ++i) {
        r.rankDims.push_back(row.perRank[i] ? row.perRank[i]->request.shape[0] : 0);
      }
      break;
    case OpType::kAlltoall:
      // Row i: rows rank i sends to each rank; a joined rank sends none (and
      // what others send it is dropped on its side).
      for (int i = 0; i < size_; ++i) {
        if (!row.perRank[i]) {
          r.rankDims.insert(r.rankDims.end(), size_, 0);
          continue;
        }
        const Request& qi = row.perRank[i]->request;
        if (!qi.splits.empty()) {
          r.rankDims.insert(r.rankDims.end(), qi.splits.begin(), qi.splits.end());
          continue;
        }
        const int64_t rows = qi.shape[0];
        if (rows % size_ != 0) {
          return error(name, subject(name, q) + ": rank " + std::to_string(ranks_[i]) +
                                 " sent " + std::to_string(rows) +
                                 " rows without splits, which does not divide evenly among " +
                                 std::to_string(size_) + " ranks; pass splits");
        }
        r.rankDims.insert(r.rankDims.end(), size_, rows / size_);
      }
      if (std::string bad = checkReceived(name, row, r.rankDims); !bad.empty()) {
        return error(name, bad);
      }
      break;
    default:
      break;
  }
  return r;
}

std::vector<Response> MessageTable::popReady() {
  std::vector<Response> out;
  for (int r : joinOrder_) {
    Response ack;
    ack.kind = ResponseKind::kJoinAck;
    ack.rankArg = r;
    out.push_back(ack);
  }
  std::vector<std::pair<uint64_t, std::string>> ready;
  std::map<std::string, std::vector<std::string>> groups;  // group -> ready members
  for (const auto& [name, row] : rows_) {
    if (!readyRow(row)) continue;
    int first = 0;
    while (!row.perRank[first]) ++first;
    const std::string& group = row.perRank[first]->group;
    if (!group.empty()) groups[group].push_back(name);
    ready.emplace_back(row.arrival, name);
  }
  // A group goes out only when every member is ready.
  std::vector<std::pair<uint64_t, std::string>> release;
  for (const auto& [arrival, name] : ready) {
    const Row& row = rows_.at(name);
    int first = 0;
    while (!row.perRank[first]) ++first;
    const RequestMsg& m = *row.perRank[first];
    if (!m.group.empty() && static_cast<int>(groups[m.group].size()) < m.groupSize) continue;
    release.emplace_back(arrival, name);
  }
  std::sort(release.begin(), release.end());
  for (const auto& [arrival, name] : release) {
    out.push_back(buildResponse(name, rows_.at(name)));
    rows_.erase(name);
  }
  bool allJoined = std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; });
  if (allJoined && !joinOrder_.empty()) {
    Response done;
    done.kind = ResponseKind::kJoinDone;
    done.rankArg = joinOrder_.back();
    out.push_back(done);
    std::fill(joined_.begin(), joined_.end(), false);
  }
  joinOrder_.clear();
  return out;
}

std::vector<MessageTable::Waiting> MessageTable::waiting() const {
  std::vector<Waiting> out;
  auto now = std::chrono::steady_clock::now();
  for (const auto& [name, row] : rows_) {
    Waiting w{name, {}, now - row.firstSeen};
    const std::vector<int32_t>* members = localMembers(row);
    for (int r = 0; r < size_; ++r) {
      if (!row.perRank[r] && expected(members, r)) w.missingRanks.push_back(ranks_[r]);
    }
    if (!w.missingRanks.empty()) out.push_back(std::move(w));
  }
  return out;
}

}  // namespace kolo
