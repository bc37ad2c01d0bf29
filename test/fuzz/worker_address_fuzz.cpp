// Fuzz target: the worker address wire form (worker_address::deserialize),
// which parses what a peer or a side channel hands over, and its inverse.
#include "fuzz.hpp"

#include <ucx/error.hpp>
#include <ucx/worker_address.hpp>

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <vector>

namespace ucx::fuzz {

void worker_address(input data) {
    // Any bytes: an address or error::malformed_address, never both.
    error_code ec;
    const ucx::worker_address a = ucx::worker_address::deserialize(data, ec);
    if (ec) {
        UCX_ASIO_FUZZ_CHECK(ec == make_error_code(error::malformed_address));
        UCX_ASIO_FUZZ_CHECK(a.empty());
    } else {
        UCX_ASIO_FUZZ_CHECK(!a.empty());
        UCX_ASIO_FUZZ_CHECK(a.ucx_bytes().size() + ucx::worker_address::header_size == data.size());
        // Encoding it again gives the input back, but for the reserved
        // header bytes 5 to 7, which are not read.
        const std::vector<std::byte> again = a.serialize();
        UCX_ASIO_FUZZ_CHECK(again.size() == data.size());
        for (std::size_t i = 0; i < data.size(); ++i)
            UCX_ASIO_FUZZ_CHECK(again[i] == data[i] || (i >= 5 && i < 8));
    }
    // The throwing overload agrees.
    bool threw = false;
    try {
        UCX_ASIO_FUZZ_CHECK(ucx::worker_address::deserialize(data) == a);
    } catch (const boost::system::system_error& e) {
        threw = true;
        UCX_ASIO_FUZZ_CHECK(e.code() == ec);
    }
    UCX_ASIO_FUZZ_CHECK(threw == static_cast<bool>(ec));

    // The same bytes as UCX's packed address: they survive the wire form.
    if (!data.empty()) {
        const ucx::worker_address raw(std::vector<std::byte>(data.begin(), data.end()));
        const ucx::worker_address back = ucx::worker_address::deserialize(raw.serialize(), ec);
        UCX_ASIO_FUZZ_CHECK(!ec && back == raw);
    }
}

} // namespace ucx::fuzz

UCX_ASIO_FUZZ_ENTRY(worker_address)
