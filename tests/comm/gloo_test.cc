#include "comm/conformance.h"
#include "comm/gloo/factory.h"

KOLO_COMM_CONFORMANCE(Gloo, kolo::comm::gloo::createControlChannel,
                      kolo::comm::gloo::createCollectives);
