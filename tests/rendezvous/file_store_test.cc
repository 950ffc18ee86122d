// FileStore specifics: atomicity across processes, on-disk layout and
// unusable directories. The Store contract itself is in
// store_conformance_test.cc.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "kolo/error.h"
#include "kolo/store.h"
#include "rendezvous_test_util.h"

namespace kolo::test {
namespace {

using std::chrono::milliseconds;

TEST(FileStore, AddIsAtomicAcrossProcesses) {
  TempDir dir;
  constexpr int kProcesses = 4;
  constexpr int kAdds = 100;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      int code = 0;
      try {
        auto store = makeFileStore(dir.path());
        for (int i = 0; i < kAdds; ++i) store->add("total", 1);
        store->set("child-" + std::to_string(p), bytesOf("done"));
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a child failed";
  }
  auto store = makeFileStore(dir.path());
  store->wait({"child-0", "child-1", "child-2", "child-3"}, milliseconds(1000));
  EXPECT_EQ(store->add("total", 0), kProcesses * kAdds);
}

TEST(FileStore, LeavesOnlyKeyFilesAndTheLockBehind) {
  TempDir dir;
  auto store = makeFileStore(dir.path() + "/nested/deeper");
  for (int i = 0; i < 20; ++i) store->set("key" + std::to_string(i % 3), bytesOf("v"));
  store->add("n", 1);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() + "/nested/deeper")) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".lock", "k_key0", "k_key1", "k_key2", "k_n"}));
}

TEST(FileStore, KeysThatCouldEscapeTheDirectoryStayInside) {
  TempDir dir;
  auto store = makeFileStore(dir.path() + "/store");
  store->set("../outside", bytesOf("x"));
  store->set("/etc/passwd", bytesOf("y"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/outside"));
  size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() + "/store")) {
    (void)entry;
    ++count;
  }
  EXPECT_EQ(count, 3u);  // two keys and .lock
  EXPECT_EQ(textOf(store->get("../outside", milliseconds(100))), "x");
}

TEST(FileStore, UnusableDirectoryIsAnInvalidArgument) {
  TempDir dir;
  std::string file = dir.path() + "/plain-file";
  std::ofstream(file) << "not a directory";
  try {
    makeFileStore(file + "/store");
    FAIL() << "a store under a regular file was created";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  EXPECT_THROW(makeFileStore(""), InvalidArgument);
}

TEST(FileStore, AddOnTextValueIsInvalidArgument) {
  TempDir dir;
  auto store = makeFileStore(dir.path());
  store->set("text", bytesOf("12abc"));
  EXPECT_THROW(store->add("text", 1), InvalidArgument);
  EXPECT_EQ(store->add("number", 7), 7);
}

}  // namespace
}  // namespace kolo::test
