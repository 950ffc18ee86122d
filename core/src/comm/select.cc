#include "comm/select.h"

#include "comm/gloo/factory.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

[[noreturn]] void notBuilt(const std::string& backend, const char* variable) {
  throw InvalidArgument(std::string(variable) + "=" + backend +
                        " but this build of kolo has no '" + backend +
                        "' backend; use " + variable + "=gloo or rebuild kolo with it");
}

}  // namespace

std::unique_ptr<ControlChannel> createControlChannel(const std::string& backend,
                                                     const BackendArgs& args) {
  if (backend == "gloo") return gloo::createControlChannel(args);
  notBuilt(backend, "KOLO_CONTROLLER");
}

std::unique_ptr<Collectives> createCollectives(const std::string& backend,
                                               const BackendArgs& args) {
  if (backend == "gloo") return gloo::createCollectives(args);
  notBuilt(backend, "KOLO_CPU_OPERATIONS");
}

}  // namespace kolo::comm
