#include "load_slot.h"

namespace normsvc::normload {

void StreamConnection::OnReadDone(bool ok) {
  if (!ok) {
    // The call has ended (the server finished it, or it was cancelled or
    // broken): no write may start any more, and OnDone must not wait for one.
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      broken_ = true;
      if (!writing_) release = ReleaseHoldLocked();  // a write in flight releases it
    }
    if (release) RemoveHold();
    return;
  }
  answered_.store(true, std::memory_order_relaxed);
  sink_->OnStreamResponse(response_);
  StartRead(&response_);
}

void StreamConnection::OnDone(const grpc::Status& status) {
  std::vector<Slot*> unsent;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    // The pool keeps every stream until the run ends (a sender may still
    // hold a pointer to one it replaced); an ended one keeps no response.
    v1::NormalizeStreamResponse().Swap(&response_);
    // gRPC ends the call only after every write's OnWriteDone, which takes
    // the written slot off the queue: what is left was never written.
    unsent.assign(queue_.begin(), queue_.end());
    queue_.clear();
  }
  sink_->OnStreamEnded(this, status, unsent);
  std::lock_guard<std::mutex> lock(mutex_);
  ended_ = true;
  done_cv_.notify_all();
}

StreamPool::StreamPool(StreamSink* sink, const std::vector<v1::Normalizer::Stub*>& stubs,
                       int per_channel, Clock::duration rotate_after)
    : sink_(sink),
      rotate_after_(rotate_after),
      current_(stubs.size() * static_cast<size_t>(per_channel)) {
  for (v1::Normalizer::Stub* stub : stubs) {
    for (int s = 0; s < per_channel; ++s) {
      stubs_.push_back(stub);
      all_.push_back(std::make_unique<StreamConnection>(sink_, stub));
      current_[stubs_.size() - 1].store(all_.back().get());
    }
  }
  failed_reopens_.assign(stubs_.size(), 0);
  given_up_.assign(stubs_.size(), false);
}

StreamPool::~StreamPool() { CloseAll(std::chrono::milliseconds(2000)); }

bool StreamPool::Send(int index, Slot* slot, bool may_reopen) {
  StreamConnection* stream = current_[index].load(std::memory_order_acquire);
  // Only a stream still open is rotated; one that has ended takes the
  // reopening path below, which counts its failures and gives up.
  if (may_reopen && rotate_after_ > Clock::duration::zero() &&
      Clock::now() - stream->opened() >= rotate_after_ && stream->open()) {
    Rotate(index, stream);
    stream = current_[index].load(std::memory_order_acquire);
  }
  if (stream->Send(slot)) return true;
  if (!may_reopen) {
    // Another sender may have just replaced (retired) the stream loaded.
    StreamConnection* current = current_[index].load(std::memory_order_acquire);
    return current != stream && current->Send(slot);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (current_[index].load(std::memory_order_relaxed) == stream) {
      failed_reopens_[index] = stream->answered() ? 0 : failed_reopens_[index] + 1;
      if (failed_reopens_[index] > kMaxFailedReopens) {
        if (!given_up_[index]) lost_.fetch_add(1);
        given_up_[index] = true;
        return false;
      }
      all_.push_back(std::make_unique<StreamConnection>(sink_, stubs_[index]));
      current_[index].store(all_.back().get(), std::memory_order_release);
      reopened_.fetch_add(1);
    }
    stream = current_[index].load(std::memory_order_relaxed);
  }
  return stream->Send(slot);
}

void StreamPool::Rotate(int index, StreamConnection* old) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (current_[index].load(std::memory_order_relaxed) != old) return;
    all_.push_back(std::make_unique<StreamConnection>(sink_, stubs_[index]));
    current_[index].store(all_.back().get(), std::memory_order_release);
    rotated_.fetch_add(1);
  }
  old->Retire();  // outside the lock: the call may end inside it
}

void StreamPool::CancelAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& stream : all_) stream->Cancel();
}

void StreamPool::CloseAll(std::chrono::milliseconds cancel_after) {
  std::vector<std::unique_ptr<StreamConnection>> streams;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    streams.swap(all_);
  }
  for (auto& stream : streams) stream->Close(cancel_after);
}

}  // namespace normsvc::normload
