#include "comm/gloo/store_adapter.h"

#include <algorithm>
#include <utility>

namespace kolo::comm::gloo {

StoreAdapter::StoreAdapter(std::shared_ptr<kolo::Store> store, std::chrono::milliseconds timeout)
    : store_(std::move(store)), timeout_(timeout) {}

void StoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(key, data);
}

std::vector<char> StoreAdapter::get(const std::string& key) { return store_->get(key, timeout_); }

void StoreAdapter::wait(const std::vector<std::string>& keys) { store_->wait(keys, timeout_); }

void StoreAdapter::wait(const std::vector<std::string>& keys,
                        const std::chrono::milliseconds& timeout) {
  // gloo passes its context timeout here; never wait longer than kolo's.
  store_->wait(keys, timeout.count() > 0 ? std::min(timeout, timeout_) : timeout_);
}

}  // namespace kolo::comm::gloo
