#include "comm/tcp/control_channel.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "comm/tcp/topology.h"
#include "kolo/error.h"

namespace kolo::comm::tcp {

ControlChannel::ControlChannel(std::unique_ptr<Mesh> mesh) : mesh_(std::move(mesh)) {}

void ControlChannel::allreduceAnd(std::vector<uint64_t>& bits) {
  allreduceBits(bits, true, "allreduce(and)");
}

void ControlChannel::allreduceOr(std::vector<uint64_t>& bits) {
  allreduceBits(bits, false, "allreduce(or)");
}

void ControlChannel::allreduceBits(std::vector<uint64_t>& bits, bool isAnd, const char* what) {
  const int n = size();
  if (n == 1 || bits.empty()) return;
  mesh_->nextOperation();
  const int64_t bytes = static_cast<int64_t>(bits.size() * sizeof(uint64_t));
  incoming_.resize(bits.size());
  char* data = reinterpret_cast<char*>(bits.data());
  auto exchange = [&](int to, int from, bool combine) {
    std::vector<Mesh::Send> sends;
    if (to >= 0) sends.push_back({to, data, static_cast<uint64_t>(bytes)});
    std::vector<Mesh::Recv> recvs;
    if (from >= 0) {
      Mesh::Recv in;
      in.from = from;
      in.fixed = combine ? reinterpret_cast<char*>(incoming_.data()) : data;
      in.expected = bytes;
      recvs.push_back(in);
    }
    mesh_->transfer(what, std::move(sends), std::move(recvs));
    if (!combine || from < 0) return;
    for (size_t i = 0; i < bits.size(); ++i) {
      bits[i] = isAnd ? (bits[i] & incoming_[i]) : (bits[i] | incoming_[i]);
    }
  };
  recursiveDoubling(rank(), n, exchange);
}

std::vector<std::vector<char>> ControlChannel::gatherv(const std::vector<char>& mine, int root) {
  checkRoot(root, "gatherv");
  const int me = rank();
  const int n = size();
  std::vector<std::vector<char>> result;
  if (n == 1) {
    result.push_back(mine);
    return result;
  }
  mesh_->nextOperation();
  const BinomialTree tree(me, n, root);
  // This rank's subtree as records: u32 rank, u64 length, bytes.
  records_.clear();
  auto append = [&](int r, const char* data, uint64_t length) {
    const uint32_t r32 = static_cast<uint32_t>(r);
    records_.insert(records_.end(), reinterpret_cast<const char*>(&r32),
                    reinterpret_cast<const char*>(&r32) + sizeof(r32));
    records_.insert(records_.end(), reinterpret_cast<const char*>(&length),
                    reinterpret_cast<const char*>(&length) + sizeof(length));
    records_.insert(records_.end(), data, data + length);
  };
  append(me, mine.data(), mine.size());
  if (!tree.children.empty()) {
    std::vector<std::vector<char>> fromChildren(tree.children.size());
    std::vector<Mesh::Recv> recvs;
    for (size_t i = 0; i < tree.children.size(); ++i) {
      Mesh::Recv in;
      in.from = tree.children[i];
      in.grow = &fromChildren[i];
      recvs.push_back(in);
    }
    mesh_->transfer("gatherv", {}, std::move(recvs));
    for (const auto& part : fromChildren) records_.insert(records_.end(), part.begin(), part.end());
  }
  if (me != root) {
    mesh_->transfer("gatherv", {{tree.parent, records_.data(), records_.size()}}, {});
    return result;
  }
  result.resize(n);
  std::vector<bool> seen(n, false);
  size_t at = 0;
  auto bad = [&](const std::string& why) {
    return Internal("control gatherv: malformed records at the root (" + why + ")");
  };
  while (at < records_.size()) {
    uint32_t r = 0;
    uint64_t length = 0;
    if (records_.size() - at < sizeof(r) + sizeof(length)) throw bad("truncated header");
    std::memcpy(&r, records_.data() + at, sizeof(r));
    std::memcpy(&length, records_.data() + at + sizeof(r), sizeof(length));
    at += sizeof(r) + sizeof(length);
    if (r >= static_cast<uint32_t>(n) || seen[r]) throw bad("rank " + std::to_string(r));
    if (records_.size() - at < length) throw bad("truncated payload");
    seen[r] = true;
    result[r].assign(records_.data() + at, records_.data() + at + length);
    at += length;
  }
  if (std::find(seen.begin(), seen.end(), false) != seen.end()) throw bad("a rank is missing");
  return result;
}

void ControlChannel::broadcast(std::vector<char>& bytes, int root) {
  checkRoot(root, "broadcast");
  const int n = size();
  if (n == 1) return;
  mesh_->nextOperation();
  const BinomialTree tree(rank(), n, root);
  if (tree.parent >= 0) {
    Mesh::Recv in;
    in.from = tree.parent;
    in.grow = &bytes;
    mesh_->transfer("broadcast", {}, {in});
  }
  if (tree.children.empty()) return;
  std::vector<Mesh::Send> sends;
  for (int child : tree.children) sends.push_back({child, bytes.data(), bytes.size()});
  mesh_->transfer("broadcast", std::move(sends), {});
}

void ControlChannel::barrier() {
  std::vector<uint64_t> word{1};
  allreduceBits(word, true, "barrier");
}

void ControlChannel::checkRoot(int root, const char* what) const {
  KOLO_CHECK_ARG(root >= 0 && root < size(), std::string("control ") + what + ": root " +
                                                 std::to_string(root) + " out of range for size " +
                                                 std::to_string(size()));
}

std::unique_ptr<comm::ControlChannel> createControlChannel(const BackendArgs& args) {
  const BackendArgs controlArgs{args.config, args.identity,
                                std::make_shared<PrefixStore>("control/", args.store),
                                args.localAddress};
  // Recursive doubling and the trees rooted at rank 0 (the coordinator's)
  // talk to these every cycle.
  return std::make_unique<ControlChannel>(
      Mesh::connect(controlArgs, "control connect",
                    recursiveDoublingPeers(args.identity.rank, args.identity.size)));
}

}  // namespace kolo::comm::tcp
