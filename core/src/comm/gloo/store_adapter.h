// StoreAdapter: presents a kolo::Store as the gloo::rendezvous::Store that
// gloo's connectFullMesh reads peer addresses from.
//
// Threading: used only while a Context connects, on the thread that builds
// the backend. Every blocking call is bounded by the timeout given at
// construction and throws kolo::Timeout when it runs out.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "kolo/store.h"

namespace kolo::comm::gloo {

class StoreAdapter final : public ::gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<kolo::Store> store, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<kolo::Store> store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace kolo::comm::gloo
