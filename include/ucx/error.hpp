// Error codes of ucx-asio: a "ucx" error category over UCX's ucs_status_t, and
// a "ucx.library" category for the conditions the library detects itself.
#pragma once

#include <boost/system/error_code.hpp>
#include <ucs/type/status.h>

#include <concepts>
#include <type_traits>

namespace ucx {

/// The error code type used throughout the library (the one Asio uses).
using error_code = boost::system::error_code;

/// UCX status codes as an error enum. The values are the negated `ucs_status_t`
/// values, so `errc::no_memory == static_cast<errc>(-UCS_ERR_NO_MEMORY)`.
enum class errc : int {
    no_message = -UCS_ERR_NO_MESSAGE,
    no_resource = -UCS_ERR_NO_RESOURCE,
    io_error = -UCS_ERR_IO_ERROR,
    no_memory = -UCS_ERR_NO_MEMORY,
    invalid_param = -UCS_ERR_INVALID_PARAM,
    unreachable = -UCS_ERR_UNREACHABLE,
    invalid_addr = -UCS_ERR_INVALID_ADDR,
    not_implemented = -UCS_ERR_NOT_IMPLEMENTED,
    message_truncated = -UCS_ERR_MESSAGE_TRUNCATED,
    no_progress = -UCS_ERR_NO_PROGRESS,
    buffer_too_small = -UCS_ERR_BUFFER_TOO_SMALL,
    no_elem = -UCS_ERR_NO_ELEM,
    some_connects_failed = -UCS_ERR_SOME_CONNECTS_FAILED,
    no_device = -UCS_ERR_NO_DEVICE,
    busy = -UCS_ERR_BUSY,
    canceled = -UCS_ERR_CANCELED,
    shmem_segment = -UCS_ERR_SHMEM_SEGMENT,
    already_exists = -UCS_ERR_ALREADY_EXISTS,
    out_of_range = -UCS_ERR_OUT_OF_RANGE,
    timed_out = -UCS_ERR_TIMED_OUT,
    exceeds_limit = -UCS_ERR_EXCEEDS_LIMIT,
    unsupported = -UCS_ERR_UNSUPPORTED,
    rejected = -UCS_ERR_REJECTED,
    not_connected = -UCS_ERR_NOT_CONNECTED,
    connection_reset = -UCS_ERR_CONNECTION_RESET,
    first_link_failure = -UCS_ERR_FIRST_LINK_FAILURE,
    last_link_failure = -UCS_ERR_LAST_LINK_FAILURE,
    first_endpoint_failure = -UCS_ERR_FIRST_ENDPOINT_FAILURE,
    endpoint_timeout = -UCS_ERR_ENDPOINT_TIMEOUT,
    last_endpoint_failure = -UCS_ERR_LAST_ENDPOINT_FAILURE,
};

/// The "ucx" error category. `message()` is UCX's own `ucs_status_string`;
/// `default_error_condition()` maps to the portable `std::errc` conditions
/// (timed out, connection reset, not enough memory, ...) where one fits.
const boost::system::error_category& error_category() noexcept;

/// Converts a UCX status into an error code. `UCS_OK` and `UCS_INPROGRESS` give
/// an empty code; `UCS_ERR_CANCELED` gives `asio::error::operation_aborted`,
/// because Asio algorithms and Beast compare against that code.
error_code make_error_code(ucs_status_t status) noexcept;

/// What the library detects itself, before or without UCX: misuse of the API,
/// a feature the context was not created with, an endpoint that cannot do the
/// operation. UCX's own failures keep their `errc` code; cancellation, end of
/// stream and closed objects keep Asio's codes (`operation_aborted`, `eof`,
/// `bad_descriptor`, ...), which Asio and Beast callers compare against.
enum class error : int {
    /// The endpoint has no connection to the peer (it was made directly from
    /// a worker address): no per-endpoint messaging, no stream.
    not_connected = 1,
    /// An active message whose sender did not allow replies.
    no_reply_endpoint,
    /// The endpoint, stream or acceptor has no socket address (it works by
    /// worker address).
    no_socket_address,
    /// An operation of the other kind of acceptor (listener versus address).
    wrong_acceptor_kind,
    /// The operation needs a feature the context was created without
    /// (`feature::am` for active messages and connections).
    feature_not_enabled,
    /// An object of another worker than the operation's.
    wrong_worker,
    /// A worker was created on a context that is not open.
    context_closed,
    /// An empty worker address.
    empty_address,
    /// A serialized worker address that is truncated or corrupt.
    malformed_address,
    /// No network interface with that name has an IPv4 address.
    no_interface_address,
    /// A remote memory access outside the remote region.
    out_of_bounds,
    /// A remote atomic on an address not aligned to the operand's size.
    misaligned_address,
    /// An active message id above `am_max_id`.
    invalid_am_id,
    /// An active message header larger than the worker allows.
    header_too_large,
    /// No active message allocator for the message's memory type.
    no_am_allocator,
    /// A memory region of zero bytes, or without memory to register.
    invalid_region,
    /// A memory type this build does not support (CUDA without CUDA support).
    memory_type_not_supported,
    /// UCX's packed remote key is too large for the key blob.
    key_too_large,
    /// A context option outside its valid range.
    invalid_option,
    /// A null allocator.
    null_allocator,
    /// The library could not allocate memory (a queue entry, an active
    /// message buffer, or the allocator returned null).
    allocation_failed,
    /// A connect or accept finished without an endpoint.
    no_endpoint,
    /// The connected peer said nothing for longer than its peer timeout (a
    /// stopped or hung process, a dropped or downed link), or did not
    /// acknowledge a graceful close within the linger time: the endpoint
    /// failed.
    peer_unresponsive,
    /// The connection's handshake did not complete within the handshake
    /// timeout (a connect to a peer that does not answer; on a listener, a
    /// client that never sent its hello, which is then closed unseen).
    handshake_timeout,
    /// The other side of a connection handshake does not speak the library's
    /// protocol (a malformed, oversized or unexpected message, another
    /// version, or the connection closed in the middle of it).
    handshake_failed,
    /// The connection handshake's authentication failed: the peer does not
    /// know the shared secret (or one side has a secret and the other none).
    authentication_failed,
    /// A configuration setting names no option (`set_context_option`, the
    /// environment with the library's prefix, a configuration file).
    unknown_option,
    /// No launcher's variables say this process's rank and group size
    /// (`detect_environment`).
    no_launch_environment,
    /// A launcher's variable is malformed or contradicts another (a rank not
    /// below the size, a number that is not one).
    invalid_launch_environment,
    /// The running UCX performs no atomics on endpoints in peer error mode
    /// (UCX 1.16 and later with their protocol layer); the atomic was not
    /// issued and the endpoint is unharmed.
    atomics_unsupported,
    /// A rendezvous store operation did not complete within the store's
    /// timeout (a key that was never set, a store server that does not
    /// answer).
    store_timeout,
    /// A rendezvous store's server or file answered something that is not
    /// the store protocol (a malformed or unexpected reply, a value that is not
    /// a counter).
    store_protocol_error,
    /// A rank outside the group (not in `[0, size)`), or a group of no rank.
    invalid_rank,
    /// The group failed: one of its ranks died, stopped answering or left,
    /// or an operation on it failed. Every pending and later operation on the
    /// group completes with this code; no partial result is reported.
    group_failed,
    /// The ranks disagree about a collective: another collective, root,
    /// operation, type or size arrived from a peer than this rank called.
    collective_mismatch,
    /// A group operation or join did not complete within its deadline; the
    /// group is failed.
    group_timeout,
    /// The context was asked to make a CUDA context (`cuda_options::create_context`)
    /// but the library was built without CUDA, no CUDA driver or device is
    /// present, or the device number is not below the number of devices.
    cuda_unavailable,
    /// The CUDA runtime failed an operation of the library (making the
    /// context, allocating device or pinned memory, an asynchronous copy).
    cuda_error,
    /// NCCL could not be loaded (`ucx::nccl`: no `libnccl.so.2` on the
    /// loader's path or at UCXASIO_NCCL_LIBRARY, or a library without the
    /// functions of NCCL 2.14 and later).
    nccl_unavailable,
    /// A rendezvous store's value is larger than the store's bound (a
    /// `file_store` key file over `file_store_options::max_value_size`, on
    /// reading or writing).
    store_value_too_large,
    /// A `file_store` key file that is not a regular file (a FIFO, a device, a
    /// directory, a socket or a symbolic link): it is not opened for reading.
    store_not_regular_file,
    /// No rendezvous store can be chosen from the launch environment
    /// (`plan_store`: no store variable, no rendezvous address, no PMIx
    /// launcher, or PMIx without this build's support for it).
    no_launch_store,
    /// A PMIx call failed (`pmix_store`): no PMIx server (`PMIx_Init`), the
    /// launcher's server went away, or it refused a value.
    pmix_failed,
    /// The launcher's PMI-1 server (`pmi_store`: `PMI_FD`, as MPICH's
    /// `mpiexec.hydra` serves) closed the connection, refused a command
    /// (`rc` other than 0), or sent a reply that is not PMI-1.
    pmi_failed,
};

/// The "ucx.library" category of `ucx::error`. `default_error_condition()`
/// maps to the portable `std::errc` conditions (not connected, operation not
/// supported, invalid argument, message size, ...) where one fits.
const boost::system::error_category& library_category() noexcept;

/// Conditions that gather the codes of every category that mean one thing,
/// for code that tests meanings rather than codes: `ec == ucx::condition::
/// peer_lost`. A code renamed between versions of the library matches the
/// same condition under its old and its new name, so code that compares
/// against the condition keeps working across the rename (the renames are
/// listed in docs/guide/errors.md). Category "ucx.condition".
enum class condition : int {
    /// A remote memory access outside the remote region:
    /// `error::out_of_bounds`, and `errc::out_of_range`, its former name.
    out_of_bounds = 1,
    /// An argument the call cannot use: `errc::invalid_param`,
    /// `errc::invalid_addr` and the library's findings that replaced them
    /// (`error::wrong_worker`, `context_closed`, `empty_address`,
    /// `malformed_address`, `misaligned_address`, `invalid_am_id`,
    /// `header_too_large`, `invalid_region`, `invalid_option`,
    /// `unknown_option`, `null_allocator`, `invalid_rank`), and
    /// `asio::error::invalid_argument` (a tag outside its operation's range,
    /// buffers whose sizes do not fit).
    invalid_argument,
    /// The operation cannot be done here: `errc::unsupported`,
    /// `errc::not_implemented`, `error::feature_not_enabled`,
    /// `no_socket_address`, `wrong_acceptor_kind`, `memory_type_not_supported`,
    /// `no_am_allocator`, `atomics_unsupported`.
    not_supported,
    /// No connection to the peer for this operation: `errc::not_connected`,
    /// `error::not_connected`, `error::no_reply_endpoint`.
    not_connected,
    /// Memory ran out: `errc::no_memory`, `error::allocation_failed`.
    out_of_memory,
    /// No such device or interface: `errc::no_device`,
    /// `error::no_interface_address`.
    no_device,
    /// A value over a limit: `errc::exceeds_limit`, `error::key_too_large`,
    /// `error::store_value_too_large`.
    too_large,
    /// A connect or accept without an endpoint: `errc::no_elem`,
    /// `error::no_endpoint`.
    no_endpoint,
    /// The peer failed, reset the connection or stopped answering:
    /// `errc::connection_reset`, UCX's endpoint failures (`errc::
    /// endpoint_timeout` and the range around it), `error::peer_unresponsive`,
    /// `asio::error::connection_reset`.
    peer_lost,
    /// A deadline passed: `errc::timed_out`, `errc::endpoint_timeout`,
    /// `error::handshake_timeout`, `store_timeout`, `group_timeout`,
    /// `asio::error::timed_out`.
    timed_out,
    /// The operation was cancelled or its object closed under it:
    /// `asio::error::operation_aborted`, `errc::canceled`.
    cancelled,
};

/// The "ucx.condition" category of `ucx::condition`.
const boost::system::error_category& condition_category() noexcept;

/// Makes the error condition of `c`, in the "ucx.condition" category.
inline boost::system::error_condition make_error_condition(condition c) noexcept {
    return boost::system::error_condition(static_cast<int>(c), condition_category());
}

namespace detail {

/// The category of an error enum of the library, specialized next to the
/// enum (`errc`, `error`, `key_errc`): `category()` names it.
template <class E>
struct error_enum {};

template <>
struct error_enum<errc> {
    static constexpr auto category = &error_category;
};

template <>
struct error_enum<error> {
    static constexpr auto category = &library_category;
};

/// An error enum of the library.
template <class E>
concept library_error_enum = requires {
    { error_enum<E>::category() } -> std::same_as<const boost::system::error_category&>;
};

} // namespace detail

/// Makes an error code of an error enum of the library, in the enum's
/// category: "ucx" for `errc`, "ucx.library" for `error`, "ucx.remote_key"
/// for `key_errc`.
template <detail::library_error_enum E>
error_code make_error_code(E e) noexcept {
    return error_code(static_cast<int>(e), detail::error_enum<E>::category());
}

} // namespace ucx

namespace boost::system {
/// The error enums of the library convert to `error_code`.
template <class E>
requires ucx::detail::library_error_enum<E>
struct is_error_code_enum<E> : std::true_type {
};
/// `ucx::condition` converts to `error_condition`.
template <>
struct is_error_condition_enum<ucx::condition> : std::true_type {};
} // namespace boost::system
