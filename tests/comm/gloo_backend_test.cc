// gloo-specific behaviour beyond the conformance suite: connection setup.
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/conformance.h"
#include "comm/gloo/collectives.h"
#include "comm/gloo/factory.h"
#include "comm/tcp/interfaces.h"
#include "kolo/error.h"
#include "kolo/store.h"

namespace kolo::test {
namespace {

TEST(GlooBackend, UnknownInterfaceIsInvalidArgument) {
  Config config = commConfig();
  config.iface = "kolo-no-such-if0";
  Identity id;
  auto store = makeHashStore();
  comm::BackendArgs args{config, id, store, ""};
  EXPECT_THROW(comm::gloo::createCollectives(args), InvalidArgument);
}

// KOLO_IFACE may list one interface per kind of host (kolorun
// --network-interfaces a,b): each rank takes the first its host has.
TEST(Interfaces, EachHostTakesTheFirstOfTheListItHas) {
  auto lo = comm::tcp::chooseInterface("kolo-no-such-if0,lo");
  EXPECT_EQ(lo.name, "lo");
  EXPECT_EQ(lo.address, "127.0.0.1");
  EXPECT_EQ(comm::tcp::chooseInterface("lo").name, "lo");
}

TEST(Interfaces, NoneOfTheListHereNamesTheListAndWhatThisHostHas) {
  try {
    comm::tcp::chooseInterface("kolo-no-such-if0,kolo-no-such-if1");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("none of the network interfaces 'kolo-no-such-if0,kolo-no-such-if1' "
                        "(KOLO_IFACE)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("lo (127.0.0.1)"), std::string::npos) << what;
  }
  try {
    comm::tcp::chooseInterface("lo,,eth0");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("expected interface names separated by commas"),
              std::string::npos)
        << e.what();
  }
}

TEST(GlooBackend, InterfaceListTakesTheFirstThisHostHas) {
  Config config = commConfig();
  config.iface = "kolo-no-such-if0,lo";
  Identity id;
  auto store = makeHashStore();
  comm::BackendArgs args{config, id, store, ""};
  EXPECT_NE(comm::gloo::createCollectives(args), nullptr);
}

TEST(GlooBackend, EmptyLocalAddressMeansLoopback) {
  Config config = commConfig();
  Identity id;
  auto store = makeHashStore();
  comm::BackendArgs args{config, id, store, ""};
  auto control = comm::gloo::createControlChannel(args);
  EXPECT_EQ(control->size(), 1);
  control->barrier();
}

TEST(GlooBackend, MissingPeerIsTimeout) {
  Config config = commConfig();
  config.timeout = std::chrono::milliseconds(300);
  Identity id;
  id.size = 2;  // rank 1 never shows up
  auto store = makeHashStore();
  comm::BackendArgs args{config, id, store, "127.0.0.1"};
  try {
    comm::gloo::createControlChannel(args);
    FAIL() << "connected without a peer";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("control connect"), std::string::npos) << e.what();
  }
}

// Above the mesh limit allreduces go through gloo's ring: check that path
// too (the conformance suite's sizes all fit the mesh).
TEST(GlooBackend, AllreduceAboveTheMeshLimitGoesThroughGloo) {
  for (int n : {2, 3}) {
    const size_t count = comm::gloo::kMeshAllreduceBytes / sizeof(float) / (n - 1) + 5;
    runWithArgs(n, [&](int rank, const comm::BackendArgs& args) {
      auto collectives = comm::gloo::createCollectives(args);
      std::vector<float> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(rank + 1 + i % 7);
      collectives->allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
      const float ranks = static_cast<float>(n * (n + 1) / 2);
      for (size_t i = 0; i < count; i += 4099) {
        ASSERT_EQ(buf[i], ranks + static_cast<float>(n * (i % 7))) << "element " << i;
      }
      ASSERT_EQ(buf[count - 1], ranks + static_cast<float>(n * ((count - 1) % 7)));
    });
  }
}

TEST(GlooBackend, BadIdentityIsInvalidArgument) {
  Config config = commConfig();
  Identity id;
  id.rank = 2;
  id.size = 2;
  auto store = makeHashStore();
  comm::BackendArgs args{config, id, store, "127.0.0.1"};
  EXPECT_THROW(comm::gloo::createCollectives(args), InvalidArgument);
}

}  // namespace
}  // namespace kolo::test
