// Adasum: adaptive summation of gradients (Maleki et al., "Adaptive
// Summation", MLSys 2021), the reduction behind Horovod's hvd.Adasum.
//
// Two vectors a and b combine as
//
//   adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
//
// where a coefficient stays 1 when its vector's squared norm is below
// sqrt(DBL_MIN): the sum for orthogonal vectors, the average for parallel
// ones, and a zero vector (what a joined rank contributes) is neutral. Each
// tensor of a fused response is its own vector: its dot product and norms are
// taken over that tensor alone, in float64, and the combined vector is
// rounded to the dtype after every combination, as Horovod's CPU code does.
//
// Ranks combine up a binary tree in rank order: (0,1), (2,3), ... then
// ((0,1),(2,3)), ... — Horovod's order for a power-of-two size. Horovod
// refuses other sizes; kolo first folds rank p+i into rank i (p the largest
// power of two below the size, i < size - p) and then runs the same tree
// over ranks 0..p-1.
//
// The data movement is that of a ring allreduce, on any Collectives backend:
// an alltoallv gives each rank one slice of every rank's buffer, the tree
// runs on the slices (one small float64 allreduce of partial dot products
// and norms per tree level), and an allgatherv assembles the result.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/collectives.h"
#include "kolo/types.h"

namespace kolo {

// Loop thread only (it keeps scratch buffers between calls).
class Adasum {
 public:
  // Replaces buf (tensors of counts[i] elements, back to back) on every rank
  // by the Adasum of all ranks' buffers. dtype must be a floating type.
  // Collective: every rank calls it with the same counts, in the same order
  // relative to other collectives. Throws what the backend throws.
  void allreduce(comm::Collectives& collectives, void* buf, const std::vector<size_t>& counts,
                 DataType dtype, int rank, int size);

 private:
  std::vector<char> work_;        // size slices of this rank's part, rank order
  std::vector<double> partials_;  // per pair and tensor: a.b, |a|^2, |b|^2
};

}  // namespace kolo
