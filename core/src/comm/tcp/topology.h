// Who talks to whom in kolo's TCP algorithms: recursive doubling for
// allreduce and binomial trees for gather and broadcast. Each keeps a
// rank's peers to O(log N), which is what lets the mesh connect lazily and
// hold a few dozen sockets at any job size.
#pragma once

#include <algorithm>
#include <vector>

namespace kolo::comm::tcp {

// Largest power of two <= n (n >= 1).
inline int powerOfTwoBelow(int n) {
  int p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

// Runs recursive doubling for rank me of n by calling
// exchange(to, from, combine) once per step: send to `to` (if >= 0) and
// receive from `from` (if >= 0); combine says whether what arrives is
// combined with this rank's value (true) or replaces it (false, the result
// handed back to a folded rank). Ranks at or past the largest power of two
// p fold into rank - p first; then log2 p rounds pair rank with rank ^ 2^k.
// Every pair combines the same two values, so a combine that orders its
// operands by rank (lower first) gives every rank the same bits.
template <typename Exchange>
void recursiveDoubling(int me, int n, Exchange&& exchange) {
  const int p = powerOfTwoBelow(n);
  const int extra = n - p;
  if (me >= p) {
    exchange(me - p, -1, false);
    exchange(-1, me - p, false);
    return;
  }
  if (me < extra) exchange(-1, me + p, true);
  for (int d = 1; d < p; d *= 2) exchange(me ^ d, me ^ d, true);
  if (me < extra) exchange(me + p, -1, false);
}

// A binomial tree over n ranks rooted at root, seen from rank me: the
// parent (-1 at the root) and the children, nearest subtree first. With
// v = (me - root) mod n, the parent is v without its lowest set bit and the
// children are v + 2^k for every 2^k below that bit.
struct BinomialTree {
  int parent = -1;
  std::vector<int> children;

  BinomialTree(int me, int n, int root) {
    const int v = (me - root + n) % n;
    int d = 1;
    for (; d < n && (v & d) == 0; d *= 2) {
      if (v + d < n) children.push_back((v + d + root) % n);
    }
    if (v != 0) parent = (v - d + root) % n;
  }
};

// The peers of recursive doubling and of the trees rooted at rank 0, the
// ones a control channel or small allreduce uses every step.
inline std::vector<int> recursiveDoublingPeers(int me, int n) {
  std::vector<int> peers;
  recursiveDoubling(me, n, [&](int to, int from, bool) {
    if (to >= 0) peers.push_back(to);
    if (from >= 0) peers.push_back(from);
  });
  const BinomialTree tree(me, n, 0);
  if (tree.parent >= 0) peers.push_back(tree.parent);
  peers.insert(peers.end(), tree.children.begin(), tree.children.end());
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

}  // namespace kolo::comm::tcp
