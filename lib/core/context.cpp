#include <ucx/context.hpp>
#include <ucx/log.hpp>
#include <ucx/memory_type.hpp>
#include <ucx/version.hpp>

#include "core/context_impl.hpp"
#include "core/ucx_settings.hpp"
#include "util/printed.hpp"

#include <boost/system/system_error.hpp>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace ucx {

namespace {

// Whether a UCX_TLS value lets posix/sysv shared memory in: setting their
// options otherwise makes UCX warn about an invalid configuration.
bool tls_admits_shared_memory(const std::string& tls) {
    const bool negated = !tls.empty() && tls[0] == '^';
    // Built with append: GCC 12 at -O3 reports a false -Wrestrict on
    // `"," + s + ","`.
    std::string list(1, ',');
    list.append(tls, negated ? 1 : 0, std::string::npos);
    list.push_back(',');
    auto has = [&](const char* name) {
        std::string item(1, ',');
        item.append(name);
        item.push_back(',');
        return list.find(item) != std::string::npos;
    };
    if (negated)
        return !(has("sm") || has("shm") || has("mm") || (has("posix") && has("sysv")));
    return has("all") || has("sm") || has("shm") || has("mm") || has("posix") || has("sysv");
}

bool shared_memory_selected(const context_options& options,
                            const std::function<const char*(const char*)>& getenv) {
    if (!options.transports.shared_memory)
        return false;
    for (const char* key : {"TLS", "UCX_TLS"}) {
        if (auto it = options.config.find(key); it != options.config.end())
            return tls_admits_shared_memory(it->second);
    }
    const auto& t = options.transports;
    if (!(t.tcp && t.cma && t.rdma && t.cuda_copy && t.nvlink))
        return true; // TLS becomes "^..." without shared memory in the list
    const char* tls = getenv("UCX_TLS");
    return tls == nullptr || tls_admits_shared_memory(tls);
}

} // namespace

std::vector<std::pair<std::string, std::string>>
make_config_settings(const context_options& options,
                     const std::function<const char*(const char*)>& getenv) {
    std::vector<std::pair<std::string, std::string>> out;
    auto env_has = [&](const char* name) { return getenv(name) != nullptr; };

    if (!options.ucx_keepalive && !env_has("UCX_KEEPALIVE_INTERVAL"))
        out.emplace_back("KEEPALIVE_INTERVAL", "inf");

    // UCX 1.13 applies transport settings given to ucp_config_modify under the
    // name of the table that declares them: posix and sysv inherit
    // ERROR_HANDLING from the "MM_" table (a "POSIX_..." key is rejected as an
    // invalid configuration when the worker is created).
    if (options.shared_memory_error_handling && shared_memory_selected(options, getenv) &&
        !env_has("UCX_MM_ERROR_HANDLING") && !env_has("UCX_POSIX_ERROR_HANDLING") &&
        !env_has("UCX_SYSV_ERROR_HANDLING")) {
        out.emplace_back("MM_ERROR_HANDLING", "y");
    }
    if (options.shared_memory_segment_size != 0 && shared_memory_selected(options, getenv) &&
        !env_has("UCX_MM_SEG_SIZE") && !env_has("UCX_POSIX_SEG_SIZE") &&
        !env_has("UCX_SYSV_SEG_SIZE")) {
        out.emplace_back("MM_SEG_SIZE", std::to_string(options.shared_memory_segment_size));
    }

    const auto& t = options.transports;
    std::string disabled;
    auto disable = [&](bool enabled, const char* alias) {
        if (enabled)
            return;
        if (!disabled.empty())
            disabled += ',';
        disabled += alias;
    };
    disable(t.tcp, "tcp");
    disable(t.shared_memory, "mm");
    disable(t.cma, "cma");
    disable(t.rdma, "ib");
    disable(t.cuda_copy, "cuda_copy");
    disable(t.nvlink, "cuda_ipc");
    if (!disabled.empty())
        out.emplace_back("TLS", "^" + disabled);

    if (!options.net_devices.empty()) {
        std::string devices;
        for (const auto& d : options.net_devices) {
            if (!devices.empty())
                devices += ',';
            devices += d;
        }
        out.emplace_back("NET_DEVICES", devices);
    }

    for (const auto& [name, value] : options.config) {
        std::string key = name.rfind("UCX_", 0) == 0 ? name.substr(4) : name;
        out.emplace_back(std::move(key), value);
    }
    return out;
}

namespace detail {

namespace {
struct config_deleter {
    void operator()(ucp_config_t* c) const noexcept { ucp_config_release(c); }
};
} // namespace

context_impl::context_impl(const context_options& options, error_code& ec) {
    // UCX 1.13 would accept a segment of 64 KiB or more, then assert in its
    // stream receive path (16-bit fragment lengths); too small a segment
    // cannot hold UCX's own headers.
    if (const std::size_t seg = options.shared_memory_segment_size;
        seg != 0 &&
        (seg < min_shared_memory_segment_size || seg > max_shared_memory_segment_size)) {
        log::write(log::severity::error, "context_options::shared_memory_segment_size " +
                                             std::to_string(seg) + " is outside [" +
                                             std::to_string(min_shared_memory_segment_size) + ", " +
                                             std::to_string(max_shared_memory_segment_size) + "]");
        ec = make_error_code(error::invalid_option);
        return;
    }
    {
        std::string prio = "inet";
        if (const auto it = options.config.find("TCP_AF_PRIO"); it != options.config.end())
            prio = it->second;
        else if (const char* e = std::getenv("UCX_TCP_AF_PRIO"))
            prio = e;
        tcp_prefers_ipv6_ = prio.rfind("inet6", 0) == 0;
    }
    // A name UCX does not know would be kept aside by ucp_config_modify and
    // have no effect.
    for (const auto& [name, value] : options.config) {
        if (!is_ucx_setting(name)) {
            log::write(log::severity::error, "context_options::config: UCX_" +
                                                 ucx_setting_name(name) +
                                                 " is not a setting of the UCX library loaded (" +
                                                 ucx_runtime_version().to_string() + ")");
            ec = make_error_code(error::unknown_option);
            return;
        }
    }
    ucp_config_t* raw = nullptr;
    if (ucs_status_t st = ucp_config_read(nullptr, nullptr, &raw); st != UCS_OK) {
        ec = make_error_code(st);
        return;
    }
    std::unique_ptr<ucp_config_t, config_deleter> config(raw);

    for (const auto& [name, value] : make_config_settings(
             options, [](const char* n) { return static_cast<const char*>(std::getenv(n)); })) {
        if (ucs_status_t st = ucp_config_modify(config.get(), name.c_str(), value.c_str());
            st != UCS_OK) {
            log::write(log::severity::error,
                       "ucp_config_modify(" + name + "=" + value + "): " + ucs_status_string(st));
            ec = make_error_code(st);
            return;
        }
    }

    features_ = options.features | feature::wakeup;
    multi_threaded_ = options.multi_threaded;
    cuda_ = options.cuda;
    if (built_with_cuda() && options.cuda.pool_size != 0)
        cuda_pool_ = std::make_shared<cuda_pool_allocator>(options.cuda.pool_size);
    // UCX looks for CUDA devices when it initialises: the process's device
    // must be current (and its context made) by then.
    if (options.cuda.create_context) {
        if (ec = make_cuda_context(options.cuda.device); ec) {
            log::write(log::severity::error, "cuda_options::create_context on device " +
                                                 std::to_string(options.cuda.device) + ": " +
                                                 ec.message());
            return;
        }
    }

    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = static_cast<std::uint64_t>(features_);
    // Workers of one context may run on different threads (one worker per
    // thread is the library's model), which UCX requires to be declared.
    params.mt_workers_shared = 1;
    // Every request has room for a pointer: a receive made with no
    // operation, in case UCX completes it inside the call, finds there the
    // operation attached when UCX answered with a request
    // (worker_impl::tag_msg_recv_at_once).
    params.field_mask |= UCP_PARAM_FIELD_REQUEST_SIZE;
    params.request_size = sizeof(void*);
    if (options.estimated_endpoints != 0) {
        params.field_mask |= UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
        params.estimated_num_eps = options.estimated_endpoints;
    }
    if (ucs_status_t st = ucp_init(&params, config.get(), &handle_); st != UCS_OK) {
        handle_ = nullptr;
        ec = make_error_code(st);
        return;
    }

    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(handle_, &attr) == UCS_OK)
        ucx_cuda_memory_ = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;

    printed_config_ = detail::printed([&](FILE* f) {
                          ucp_config_print(config.get(), f, nullptr, UCS_CONFIG_PRINT_CONFIG);
                      }).value_or(std::string());
    // UCX 1.16 and later, with their protocol layer on (PROTO_ENABLE, the
    // default), have no atomic protocol for endpoints in peer error mode
    // (every endpoint of this library): an atomic is cancelled with "cannot
    // find remote protocol ... amo_post" and UCX fails the whole endpoint
    // (measured with 1.22.0). Without the protocol layer UCX 1.22 fails other
    // operations ("Unsupported operation" for a get between processes).
    if (ucx_runtime_version() >= ucx_version{1, 16, 0}) {
        const std::string key = "UCX_PROTO_ENABLE=";
        const auto at = printed_config_.find("\n" + key);
        std::string value = "y";
        if (at != std::string::npos) {
            const auto begin = at + 1 + key.size();
            value = printed_config_.substr(begin, printed_config_.find('\n', begin) - begin);
        }
        atomics_supported_ = value == "n" || value == "no" || value == "off";
    }
    ec = {};
    log::write(log::severity::debug, "ucp context created");
}

context_impl::~context_impl() {
    if (handle_)
        ucp_cleanup(handle_);
}

} // namespace detail

context::context() : context(context_options{}) {}

context::context(const context_options& options) {
    error_code ec;
    impl_ = std::make_shared<detail::context_impl>(options, ec);
    if (ec)
        throw boost::system::system_error(ec, "ucx::context");
}

context::context(const context_options& options, error_code& ec)
    : impl_(std::make_shared<detail::context_impl>(options, ec)) {}

ucp_context_h context::native_handle() const noexcept {
    return impl_->native();
}

feature context::features() const noexcept {
    return impl_->features();
}

bool context::supports_atomics() const noexcept {
    return impl_ && impl_->atomics_supported();
}

bool context::ucx_supports_cuda_memory() const noexcept {
    return impl_ && impl_->ucx_cuda_memory();
}

const cuda_options& context::cuda() const noexcept {
    static const cuda_options none{};
    return impl_ ? impl_->cuda() : none;
}

std::optional<std::string> context::config_value(const std::string& name) const {
    std::istringstream in(impl_->printed_config());
    const std::string prefix = "UCX_" + name + "=";
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(prefix, 0) == 0)
            return line.substr(prefix.size());
    }
    return std::nullopt;
}

std::string ucx_version::to_string() const {
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

int library_version() noexcept {
    return UCX_ASIO_VERSION;
}

ucx_version ucx_build_version() noexcept {
    // "major.minor.release" from the build (CMake passes pkg-config's version).
    ucx_version v;
    unsigned* parts[] = {&v.major, &v.minor, &v.release};
    std::size_t i = 0;
    for (const char* p = UCX_ASIO_BUILT_WITH_UCX; *p && i < 3; ++p) {
        if (*p == '.')
            ++i;
        else if (*p >= '0' && *p <= '9')
            *parts[i] = *parts[i] * 10 + static_cast<unsigned>(*p - '0');
        else
            break;
    }
    return v;
}

ucx_version ucx_runtime_version() noexcept {
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    return {major, minor, release};
}

} // namespace ucx
