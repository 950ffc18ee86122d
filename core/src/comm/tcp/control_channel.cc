#include "comm/tcp/control_channel.h"

#include <string>
#include <utility>

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
  const int me = rank();
  const int64_t bytes = static_cast<int64_t>(bits.size() * sizeof(uint64_t));
  incoming_.resize(bits.size());
  for (int distance = 1; distance < n; distance *= 2) {
    const int to = (me + distance) % n;
    const int from = (me - distance + n) % n;
    Mesh::Recv in;
    in.from = from;
    in.fixed = reinterpret_cast<char*>(incoming_.data());
    in.expected = bytes;
    mesh_->transfer(what, {{to, reinterpret_cast<const char*>(bits.data()),
                            static_cast<uint64_t>(bytes)}},
                    {in});
    for (size_t i = 0; i < bits.size(); ++i) {
      bits[i] = isAnd ? (bits[i] & incoming_[i]) : (bits[i] | incoming_[i]);
    }
  }
}

std::vector<std::vector<char>> ControlChannel::gatherv(const std::vector<char>& mine, int root) {
  checkRoot(root, "gatherv");
  const int me = rank();
  const int n = size();
  std::vector<std::vector<char>> result;
  if (me != root) {
    if (n > 1) mesh_->transfer("gatherv", {{root, mine.data(), mine.size()}}, {});
    return result;
  }
  result.resize(n);
  std::vector<Mesh::Recv> recvs;
  for (int r = 0; r < n; ++r) {
    if (r == root) continue;
    Mesh::Recv in;
    in.from = r;
    in.grow = &result[r];
    recvs.push_back(in);
  }
  if (n > 1) mesh_->transfer("gatherv", {}, std::move(recvs));
  result[root] = mine;
  return result;
}

void ControlChannel::broadcast(std::vector<char>& bytes, int root) {
  checkRoot(root, "broadcast");
  const int n = size();
  if (n == 1) return;
  if (rank() == root) {
    std::vector<Mesh::Send> sends;
    for (int r = 0; r < n; ++r) {
      if (r != root) sends.push_back({r, bytes.data(), bytes.size()});
    }
    mesh_->transfer("broadcast", std::move(sends), {});
    return;
  }
  Mesh::Recv in;
  in.from = root;
  in.grow = &bytes;
  mesh_->transfer("broadcast", {}, {in});
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
  return std::make_unique<ControlChannel>(Mesh::connect(controlArgs, "control connect"));
}

}  // namespace kolo::comm::tcp
