#include "check_build.h"

#include "kolo/build_config.h"

#ifndef KOLO_BUILT_WITH_TORCH
#error "launcher/CMakeLists.txt defines KOLO_BUILT_WITH_TORCH (0 or 1)"
#endif

namespace kolo::launcher {
namespace {

std::string row(bool has, const std::string& what) {
  return std::string("    [") + (has ? "X" : " ") + "] " + what + "\n";
}

}  // namespace

std::string checkBuildReport(bool verbose) {
  std::string out = verbose ? "\n" : "";
  out += "kolo v" KOLO_VERSION ":\n\n";
  out += "Available Frameworks:\n";
  out += row(false, "TensorFlow");
  out +=
      row(KOLO_BUILT_WITH_TORCH, "PyTorch (LibTorch adapter; kolo.torch where built with Python)");
  out += row(false, "MXNet");
  out += "\nAvailable Controllers:\n";
  out += row(KOLO_WITH_MPI, "MPI");
  out += row(KOLO_WITH_GLOO, "Gloo");
  out += "\nAvailable Tensor Operations:\n";
  out += row(KOLO_WITH_NCCL, "NCCL");
  out += row(false, "DDL");
  out += row(false, "CCL");
  out += row(KOLO_WITH_MPI, "MPI");
  out += row(KOLO_WITH_GLOO, "Gloo");
  out += row(true, "Shared memory (ranks of one host; hierarchical collectives)");
  out += "\nAvailable Devices:\n";
  out += row(true, "CPU");
  out += row(KOLO_WITH_CUDA, "CUDA");
  return out;
}

}  // namespace kolo::launcher
