// identityFromHosts: the one definition of local and cross ranks (the
// process sets' identity is it over their members' hosts), on even and
// uneven hosts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kolo/error.h"
#include "kolo/identity.h"

namespace kolo {
namespace {

TEST(IdentityFromHosts, EvenHostsGiveHostIndexAsCrossRank) {
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  const Identity id = identityFromHosts(3, hosts);
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.size, 4);
  EXPECT_EQ(id.localRank, 1);
  EXPECT_EQ(id.localSize, 2);
  EXPECT_EQ(id.crossRank, 1);
  EXPECT_EQ(id.crossSize, 2);
}

TEST(IdentityFromHosts, UnevenHostsCountOnlyTheRanksWithTheSameLocalRank) {
  // Host a runs ranks 0, 1, 3; host b runs rank 2.
  const std::vector<std::string> hosts = {"a", "a", "b", "a"};
  const Identity two = identityFromHosts(2, hosts);
  EXPECT_EQ(two.localRank, 0);
  EXPECT_EQ(two.localSize, 1);
  EXPECT_EQ(two.crossRank, 1);  // after rank 0, local rank 0 on host a
  EXPECT_EQ(two.crossSize, 2);
  const Identity three = identityFromHosts(3, hosts);
  EXPECT_EQ(three.localRank, 2);
  EXPECT_EQ(three.localSize, 3);
  EXPECT_EQ(three.crossRank, 0);  // no other host has a local rank 2
  EXPECT_EQ(three.crossSize, 1);
  EXPECT_THROW(identityFromHosts(4, hosts), InvalidArgument);
}

}  // namespace
}  // namespace kolo
