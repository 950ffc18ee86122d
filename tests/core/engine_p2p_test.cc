// Point-to-point messages through real engines (Gloo), ranks as threads:
// send and recv between pairs in both directions, in order per tag, to a
// rank that never named the sender; recv from any source taking the first
// message that reached the rank and telling whose it was; and the errors.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/ops_util.h"
#include "harness/harness.h"

namespace kolo::test {
namespace {

Request floats(size_t n) {
  return makeRequest("", OpType::kBroadcast, DataType::kFloat32, {static_cast<int64_t>(n)});
}

Handle sendTo(Engine& engine, int peer, int tag, const std::vector<float>& v) {
  Entry e;
  e.input = v.data();
  return engine.send(peer, tag, floats(v.size()), std::move(e));
}

Handle recvFrom(Engine& engine, int peer, int tag, std::vector<float>& v) {
  Entry e;
  e.output = v.data();
  return engine.recv(peer, tag, floats(v.size()), std::move(e));
}

TEST(PointToPoint, PairsExchangeInBothDirectionsInOrderPerTag) {
  spawn(3, [](int rank, Engine& engine) {
    if (rank == 0) {
      std::vector<float> a(3, 1.0f), b(3, 2.0f);
      // Two messages with one tag, and one with another: sent at once.
      Handle h1 = sendTo(engine, 1, 5, a);
      Handle h2 = sendTo(engine, 1, 5, b);
      Handle h3 = sendTo(engine, 2, 9, a);
      std::vector<float> back(2, 0.0f);
      Handle r = recvFrom(engine, 1, 6, back);
      h1.wait();
      h2.wait();
      h3.wait();
      r.wait();
      EXPECT_EQ(r.source(), 1);
      EXPECT_FLOAT_EQ(back[1], 42.0f);
    } else if (rank == 1) {
      std::vector<float> first(3, 0.0f), second(3, 0.0f);
      // Posted in the order sent: the first takes the first message.
      Handle r1 = recvFrom(engine, 0, 5, first);
      Handle r2 = recvFrom(engine, 0, 5, second);
      r1.wait();
      r2.wait();
      EXPECT_FLOAT_EQ(first[2], 1.0f);
      EXPECT_FLOAT_EQ(second[2], 2.0f);
      EXPECT_EQ(r2.source(), 0);
      std::vector<float> reply(2, 42.0f);
      sendTo(engine, 0, 6, reply).wait();
    } else {
      std::vector<float> got(3, 0.0f);
      recvFrom(engine, 0, 9, got).wait();
      EXPECT_FLOAT_EQ(got[0], 1.0f);
    }
    // A rank that shuts down ends the job: wait for the others.
    engine.barrier().wait();
  });
}

TEST(PointToPoint, TwoRanksSendingToEachOtherWithOneTagAtOnceEachGetTheOthers) {
  // Both directions of a pair with one tag, sent before either receives:
  // two messages, not one broadcast with two senders.
  spawn(2, [](int rank, Engine& engine) {
    const int peer = 1 - rank;
    std::vector<float> mine(3, 10.0f + static_cast<float>(rank)), theirs(3, 0.0f);
    Handle sent = sendTo(engine, peer, 1, mine);
    Handle got = recvFrom(engine, peer, 1, theirs);
    sent.wait();
    got.wait();
    EXPECT_EQ(got.source(), peer);
    EXPECT_FLOAT_EQ(theirs[2], 10.0f + static_cast<float>(peer));
    engine.barrier().wait();
  });
}

TEST(PointToPoint, RecvFromAnySourceTakesTheFirstMessageAndNamesItsSender) {
  ThreadBarrier firstTaken(3);
  spawn(3, [&](int rank, Engine& engine) {
    if (rank == 0) {
      // Posted before any rank sent, and before this rank knows any pair.
      std::vector<float> first(4, 0.0f), second(4, 0.0f);
      Handle r = recvFrom(engine, Engine::kAnySource, 3, first);
      r.wait();
      EXPECT_EQ(r.source(), 2);
      EXPECT_FLOAT_EQ(first[0], 20.0f);
      firstTaken.arrive();
      Handle r2 = recvFrom(engine, Engine::kAnySource, 3, second);
      r2.wait();
      EXPECT_EQ(r2.source(), 1);
      EXPECT_FLOAT_EQ(second[3], 10.0f);
    } else if (rank == 2) {
      std::vector<float> v(4, 20.0f);
      sendTo(engine, 0, 3, v).wait();
      firstTaken.arrive();
    } else {
      // Rank 1 sends only once rank 0 took rank 2's message.
      firstTaken.arrive();
      std::vector<float> v(4, 10.0f);
      sendTo(engine, 0, 3, v).wait();
    }
    engine.barrier().wait();
  });
}

TEST(PointToPoint, AMessageKeptUntilARecvComesAndTheTagsKeptApart) {
  ThreadBarrier sent(2);
  spawn(2, [&](int rank, Engine& engine) {
    if (rank == 0) {
      std::vector<float> a(2, 1.0f), b(2, 2.0f);
      sendTo(engine, 1, 1, a).wait();
      sendTo(engine, 1, 2, b).wait();
      sent.arrive();
    } else {
      sent.arrive();
      // Both messages reached this rank before any recv; tag 2 first.
      std::vector<float> two(2, 0.0f), one(2, 0.0f);
      Handle r2 = recvFrom(engine, Engine::kAnySource, 2, two);
      r2.wait();
      EXPECT_FLOAT_EQ(two[0], 2.0f);
      recvFrom(engine, 0, 1, one).wait();
      EXPECT_FLOAT_EQ(one[0], 1.0f);
    }
    engine.barrier().wait();
  });
}

TEST(PointToPoint, BadCallsAndMismatchedMessagesNameWhatIsWrong) {
  spawn(2, [](int rank, Engine& engine) {
    std::vector<float> v(3, 1.0f);
    auto refused = [&](const std::function<void()>& call, const std::string& text) {
      try {
        call();
        ADD_FAILURE() << "expected InvalidArgument containing: " << text;
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      }
    };
    refused([&] { sendTo(engine, rank, 0, v); }, "is not another rank of this job");
    refused([&] { sendTo(engine, 7, 0, v); }, "is not another rank of this job");
    refused([&] { sendTo(engine, 1 - rank, -1, v); }, "tag -1 is negative");
    refused([&] { recvFrom(engine, -5, 0, v); }, "nor kAnySource");
    Request cuda = floats(3);
    cuda.device = DeviceKind::kCuda;
    refused(
        [&] {
          engine.send(1 - rank, 0, cuda, Entry{v.data(), nullptr, {}, {}});
        },
        "take CPU tensors");
    if (rank == 0) {
      sendTo(engine, 1, 4, v).wait();
    } else {
      std::vector<float> small(2, 0.0f);
      Handle r = recvFrom(engine, 0, 4, small);
      try {
        r.wait();
        ADD_FAILURE() << "a message of 3 floats into 2 must fail";
      } catch (const Mismatch& e) {
        EXPECT_NE(std::string(e.what()).find("rank 0 sent float32[3] but this rank receives "
                                             "float32[2]"),
                  std::string::npos)
            << e.what();
      }
      EXPECT_EQ(r.source(), 0);
    }
    engine.barrier().wait();
  });
}

}  // namespace
}  // namespace kolo::test
