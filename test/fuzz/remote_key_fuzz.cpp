// Fuzz target: the remote key blob as received from a peer (key_blob::parse).
// This is all the library reads of it: the packed rkey inside goes to UCX's
// ucp_ep_rkey_unpack, which needs an endpoint and is not fuzzed here.
#include "fuzz.hpp"

#include <ucx/memory_type.hpp>
#include <ucx/remote_key.hpp>

#include <algorithm>
#include <vector>

namespace ucx::fuzz {

void remote_key(input data) {
    error_code ec;
    const key_blob k = key_blob::parse(data, ec);
    if (ec) {
        UCX_ASIO_FUZZ_CHECK(ec.category() == key_category());
        UCX_ASIO_FUZZ_CHECK(ec.value() >= static_cast<int>(key_errc::truncated) &&
                            ec.value() <= static_cast<int>(key_errc::corrupt));
        UCX_ASIO_FUZZ_CHECK(!ec.message().empty());
        UCX_ASIO_FUZZ_CHECK(k.rkey.empty() && k.length == 0);
    } else {
        // What UCX gets lies inside the input, and the region is sane.
        UCX_ASIO_FUZZ_CHECK(!k.rkey.empty() && k.rkey.size() <= key_blob::max_rkey_size);
        UCX_ASIO_FUZZ_CHECK(k.rkey.data() == data.data() + key_blob::header_size);
        UCX_ASIO_FUZZ_CHECK(key_blob::header_size + k.rkey.size() + key_blob::trailer_size ==
                            data.size());
        UCX_ASIO_FUZZ_CHECK(k.length > 0 && k.address + k.length > k.address);
        UCX_ASIO_FUZZ_CHECK(k.memory_type == memory_type::host ||
                            k.memory_type == memory_type::cuda ||
                            k.memory_type == memory_type::cuda_managed);
        // Every byte is checked: building it again gives the input back.
        const std::vector<std::byte> again =
            key_blob::build(k.address, k.length, k.memory_type, k.rkey);
        UCX_ASIO_FUZZ_CHECK(std::equal(again.begin(), again.end(), data.begin(), data.end()));
    }

    // Fields from the input: what build writes, parse reads back.
    reader r(data);
    const std::uint64_t address = r.uint(8);
    const std::uint64_t length = r.uint(8);
    const auto type = static_cast<memory_type>(r.byte() % 3);
    const input rkey = r.rest();
    const std::vector<std::byte> blob = key_blob::build(address, length, type, rkey);
    const key_blob back = key_blob::parse(blob, ec);
    const bool sane = !rkey.empty() && rkey.size() <= key_blob::max_rkey_size && length > 0 &&
                      address + length > address;
    UCX_ASIO_FUZZ_CHECK(!ec == sane);
    if (sane) {
        UCX_ASIO_FUZZ_CHECK(back.address == address && back.length == length &&
                            back.memory_type == type);
        UCX_ASIO_FUZZ_CHECK(
            std::equal(back.rkey.begin(), back.rkey.end(), rkey.begin(), rkey.end()));
    }
}

} // namespace ucx::fuzz

UCX_ASIO_FUZZ_ENTRY(remote_key)
