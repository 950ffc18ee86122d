// gloo's rendezvous through a kolo store (the benchmarks that compare
// against raw Gloo connect it through the job's store).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "kolo/store.h"

namespace kolo::bench {

class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<kolo::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, data);
  }
  std::vector<char> get(const std::string& key) override { return store_->get(key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    store_->wait(keys, timeout_);
  }

 private:
  std::shared_ptr<kolo::Store> store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace kolo::bench
