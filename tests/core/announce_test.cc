// announceArrival: under kolorun's environment a rank's arrival key lands
// in kolorun's store; elsewhere nothing is sent.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "core/env_lookup.h"
#include "kolo/arrival.h"
#include "kolo/tcp_store.h"

namespace kolo {
namespace {

TEST(AnnounceArrival, UnderKolorunSetsTheRanksKeyInItsStore) {
  TcpStoreServer server("127.0.0.1", 0, "s3cret");
  const auto env = envOf({{"KOLO_RANK", "2"},
                          {"KOLO_SIZE", "4"},
                          {"KOLO_RENDEZVOUS_ADDR", "127.0.0.1"},
                          {"KOLO_RENDEZVOUS_PORT", std::to_string(server.port())},
                          {"KOLO_SECRET_KEY", "s3cret"}});
  EXPECT_FALSE(server.localStore()->check(arrivalKey(2)));
  EXPECT_TRUE(announceArrival(std::chrono::seconds(10), env));
  EXPECT_TRUE(server.localStore()->check(arrivalKey(2)));
  EXPECT_EQ(arrivalKey(2), "kolo/arrived/2");
}

TEST(AnnounceArrival, ElsewhereSendsNothing) {
  EXPECT_FALSE(announceArrival(std::chrono::seconds(1), envOf({})));
  EXPECT_FALSE(announceArrival(std::chrono::seconds(1), envOf({{"RANK", "1"},
                                                               {"WORLD_SIZE", "2"},
                                                               {"LOCAL_RANK", "1"},
                                                               {"MASTER_ADDR", "127.0.0.1"},
                                                               {"MASTER_PORT", "29500"}})));
}

}  // namespace
}  // namespace kolo
