#include "comm/conformance.h"
#include "comm/shm/factory.h"

KOLO_COMM_CONFORMANCE(Shm, kolo::comm::shm::createControlChannel,
                      kolo::comm::shm::createCollectives);
