// Unit tests of ucx::make_config_settings (pure) and of the settings a real
// ucx::context ends up with (creating a context needs no network traffic).
#include <ucx/context.hpp>
#include <ucx/version.hpp>

#include <boost/system/system_error.hpp>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

using settings = std::vector<std::pair<std::string, std::string>>;

// A fake environment: getenv answers from a map.
struct fake_env {
    std::map<std::string, std::string> vars;

    settings run(const ucx::context_options& options) const {
        return ucx::make_config_settings(options, [this](const char* name) -> const char* {
            auto it = vars.find(name);
            return it == vars.end() ? nullptr : it->second.c_str();
        });
    }
};

bool has_key(const settings& s, const std::string& key) {
    for (const auto& kv : s)
        if (kv.first == key)
            return true;
    return false;
}

std::optional<std::string> value_of(const settings& s, const std::string& key) {
    std::optional<std::string> v;
    for (const auto& kv : s)
        if (kv.first == key)
            v = kv.second; // the last one wins, as in ucp_config_modify
    return v;
}

TEST(ConfigSettings, UcxKeepaliveIsOffUnlessAskedFor) {
    fake_env env;
    EXPECT_EQ(value_of(env.run({}), "KEEPALIVE_INTERVAL"), "inf");
    ucx::context_options o;
    o.ucx_keepalive = true;
    EXPECT_FALSE(has_key(env.run(o), "KEEPALIVE_INTERVAL"));
    env.vars["UCX_KEEPALIVE_INTERVAL"] = "1s";
    EXPECT_FALSE(has_key(env.run({}), "KEEPALIVE_INTERVAL"));
    // An explicit setting in `config` wins: it comes last.
    o.ucx_keepalive = false;
    o.config["KEEPALIVE_INTERVAL"] = "2s";
    EXPECT_EQ(value_of(fake_env{}.run(o), "KEEPALIVE_INTERVAL"), "2s");
}

TEST(ConfigSettings, DefaultsGiveMmErrorHandlingAndSegmentSize) {
    const fake_env env;
    EXPECT_EQ(env.run({}), (settings{{"KEEPALIVE_INTERVAL", "inf"},
                                     {"MM_ERROR_HANDLING", "y"},
                                     {"MM_SEG_SIZE", "32832"}}));
}

TEST(ConfigSettings, GetenvIsAskedNotTheProcessEnvironment) {
    // The process environment must not leak in: with a fake env that has
    // UCX_MM_ERROR_HANDLING, the setting is suppressed even if the real one lacks it.
    fake_env env;
    env.vars["UCX_MM_ERROR_HANDLING"] = "n";
    EXPECT_EQ(env.run({}), (settings{{"KEEPALIVE_INTERVAL", "inf"}, {"MM_SEG_SIZE", "32832"}}));
}

TEST(ConfigSettings, EnvErrorHandlingSuppressesMmErrorHandling) {
    for (const char* var :
         {"UCX_MM_ERROR_HANDLING", "UCX_POSIX_ERROR_HANDLING", "UCX_SYSV_ERROR_HANDLING"}) {
        fake_env env;
        env.vars[var] = "y";
        EXPECT_FALSE(has_key(env.run({}), "MM_ERROR_HANDLING")) << var;
        EXPECT_EQ(env.run({}), (settings{{"KEEPALIVE_INTERVAL", "inf"}, {"MM_SEG_SIZE", "32832"}}))
            << var;
    }
}

TEST(ConfigSettings, OptionOffSuppressesMmErrorHandling) {
    const fake_env env;
    ucx::context_options o;
    o.shared_memory_error_handling = false;
    EXPECT_EQ(env.run(o), (settings{{"KEEPALIVE_INTERVAL", "inf"}, {"MM_SEG_SIZE", "32832"}}));
}

TEST(ConfigSettings, SegmentSizeFollowsOptionAndYieldsToEnvironment) {
    {
        const fake_env env;
        ucx::context_options o;
        o.shared_memory_segment_size = 32832;
        EXPECT_EQ(value_of(env.run(o), "MM_SEG_SIZE"), "32832");
        o.shared_memory_segment_size = 0; // UCX's default
        EXPECT_FALSE(has_key(env.run(o), "MM_SEG_SIZE"));
    }
    for (const char* var : {"UCX_MM_SEG_SIZE", "UCX_POSIX_SEG_SIZE", "UCX_SYSV_SEG_SIZE"}) {
        fake_env env;
        env.vars[var] = "8256";
        EXPECT_FALSE(has_key(env.run({}), "MM_SEG_SIZE")) << var;
        EXPECT_TRUE(has_key(env.run({}), "MM_ERROR_HANDLING")) << var;
    }
    // Without shared memory there is nothing to size (UCX would reject the key).
    fake_env env;
    env.vars["UCX_TLS"] = "tcp,self";
    EXPECT_FALSE(has_key(env.run({}), "MM_SEG_SIZE"));
}

TEST(ConfigSettings, DisabledTransportsGiveNegatedTls) {
    const fake_env env;
    ucx::context_options o;
    o.transports.tcp = false;
    o.transports.cma = false;
    EXPECT_EQ(env.run(o), (settings{{"KEEPALIVE_INTERVAL", "inf"},
                                    {"MM_ERROR_HANDLING", "y"},
                                    {"MM_SEG_SIZE", "32832"},
                                    {"TLS", "^tcp,cma"}}));

    ucx::context_options all_off;
    all_off.transports = {false, false, false, false, false, false};
    EXPECT_EQ(value_of(env.run(all_off), "TLS"), "^tcp,mm,cma,ib,cuda_copy,cuda_ipc");

    ucx::context_options gpu_off;
    gpu_off.transports.cuda_copy = false;
    gpu_off.transports.nvlink = false;
    gpu_off.transports.rdma = false;
    EXPECT_EQ(value_of(env.run(gpu_off), "TLS"), "^ib,cuda_copy,cuda_ipc");
}

TEST(ConfigSettings, NoSharedMemoryGivesNotMmAndNoErrorHandling) {
    const fake_env env;
    ucx::context_options o;
    o.transports.shared_memory = false;
    EXPECT_EQ(env.run(o), (settings{{"KEEPALIVE_INTERVAL", "inf"}, {"TLS", "^mm"}}));
}

TEST(ConfigSettings, EnvTlsWithoutSharedMemorySuppressesMmErrorHandling) {
    {
        fake_env env;
        env.vars["UCX_TLS"] = "tcp";
        EXPECT_FALSE(has_key(env.run({}), "MM_ERROR_HANDLING"));
    }
    {
        fake_env env;
        env.vars["UCX_TLS"] = "tcp,self,cma";
        EXPECT_FALSE(has_key(env.run({}), "MM_ERROR_HANDLING"));
    }
    // A name that merely contains "sm" is not shared memory.
    {
        fake_env env;
        env.vars["UCX_TLS"] = "tcp,smx";
        EXPECT_FALSE(has_key(env.run({}), "MM_ERROR_HANDLING"));
    }
    for (const char* tls : {"sm,self", "^tcp", "tcp,posix", "all", "self,shm", "sysv", "mm"}) {
        fake_env env;
        env.vars["UCX_TLS"] = tls;
        EXPECT_EQ(value_of(env.run({}), "MM_ERROR_HANDLING"), "y") << tls;
    }
}

TEST(ConfigSettings, NetDevicesAreJoined) {
    const fake_env env;
    ucx::context_options o;
    o.shared_memory_error_handling = false;
    o.shared_memory_segment_size = 0;
    o.net_devices = {"lo", "eth0"};
    EXPECT_EQ(env.run(o), (settings{{"KEEPALIVE_INTERVAL", "inf"}, {"NET_DEVICES", "lo,eth0"}}));
    o.net_devices = {"mlx5_0:1"};
    EXPECT_EQ(env.run(o), (settings{{"KEEPALIVE_INTERVAL", "inf"}, {"NET_DEVICES", "mlx5_0:1"}}));
}

TEST(ConfigSettings, ConfigEntriesPassThroughWithPrefixStripped) {
    const fake_env env;
    ucx::context_options o;
    o.shared_memory_error_handling = false;
    o.shared_memory_segment_size = 0;
    o.ucx_keepalive = true;
    o.config = {{"RNDV_THRESH", "64k"}, {"UCX_KEEPALIVE_INTERVAL", "inf"}};
    const settings s = env.run(o);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(value_of(s, "RNDV_THRESH"), "64k");
    EXPECT_EQ(value_of(s, "KEEPALIVE_INTERVAL"), "inf");
    EXPECT_FALSE(has_key(s, "UCX_KEEPALIVE_INTERVAL"));
    // Only a leading "UCX_" is a prefix.
    o.config = {{"XUCX_A", "1"}};
    EXPECT_EQ(env.run(o), (settings{{"XUCX_A", "1"}}));
}

TEST(ConfigSettings, ConfigEntriesComeLastAndOverride) {
    const fake_env env;
    ucx::context_options o;
    o.transports.cma = false;
    o.ucx_keepalive = true;
    o.net_devices = {"lo"};
    o.config = {{"UCX_TLS", "tcp"}, {"NET_DEVICES", "eth0"}, {"MM_ERROR_HANDLING", "n"}};
    const settings s = env.run(o);
    // TLS=tcp in the config leaves shared memory out: no MM_ERROR_HANDLING default.
    ASSERT_EQ(s.size(), 5u);
    EXPECT_EQ(s[0], (std::pair<std::string, std::string>{"TLS", "^cma"}));
    EXPECT_EQ(s[1], (std::pair<std::string, std::string>{"NET_DEVICES", "lo"}));
    // The three config entries follow, in map order.
    EXPECT_EQ(s[2].first, "MM_ERROR_HANDLING");
    EXPECT_EQ(s[3].first, "NET_DEVICES");
    EXPECT_EQ(s[4].first, "TLS");
    EXPECT_EQ(value_of(s, "TLS"), "tcp");
    EXPECT_EQ(value_of(s, "NET_DEVICES"), "eth0");
    EXPECT_EQ(value_of(s, "MM_ERROR_HANDLING"), "n");
}

// Restores (or unsets) an environment variable at scope exit.
class scoped_env {
public:
    scoped_env(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name))
            old_ = old;
        if (value)
            ::setenv(name, value, 1);
        else
            ::unsetenv(name);
    }
    ~scoped_env() {
        if (old_)
            ::setenv(name_.c_str(), old_->c_str(), 1);
        else
            ::unsetenv(name_.c_str());
    }
    scoped_env(const scoped_env&) = delete;
    scoped_env& operator=(const scoped_env&) = delete;

private:
    std::string name_;
    std::optional<std::string> old_;
};

TEST(ConfigContext, RealContextAppliesOptions) {
    // The environment says otherwise; the explicit options must win.
    scoped_env devices("UCX_NET_DEVICES", "no_such_dev0");
    scoped_env tls("UCX_TLS", nullptr);
    ucx::context_options o;
    o.net_devices = {"lo"};
    o.transports.cma = false;
    ucx::context ctx(o);
    ASSERT_NE(ctx.native_handle(), nullptr);
    EXPECT_EQ(ctx.config_value("NET_DEVICES"), "lo");
    EXPECT_EQ(ctx.config_value("TLS"), "^cma");
    EXPECT_EQ(ctx.config_value("NO_SUCH_KEY"), std::nullopt);
    // A prefix of a real key is not a key.
    EXPECT_EQ(ctx.config_value("NET_DEV"), std::nullopt);
    EXPECT_TRUE((ctx.features() & ucx::feature::wakeup) == ucx::feature::wakeup);
}

TEST(ConfigContext, ConfigMapOverridesEnvironment) {
    scoped_env devices("UCX_NET_DEVICES", "lo");
    ucx::context_options o;
    o.config = {{"UCX_RNDV_THRESH", "12345"}};
    o.features = ucx::feature::tag;
    ucx::context ctx(o);
    // As UCX prints it: "12345" (UCX 1.13), "intra:12345,inter:12345" (UCX
    // 1.22, which keeps a value per locality).
    const auto value = ctx.config_value("RNDV_THRESH");
    ASSERT_TRUE(value.has_value());
    EXPECT_TRUE(*value == "12345" || *value == "intra:12345,inter:12345") << *value;
    // wakeup is always added.
    EXPECT_EQ(ctx.features(), ucx::feature::tag | ucx::feature::wakeup);
}

TEST(ConfigContext, SegmentSizeOutOfBoundsIsInvalidParam) {
    scoped_env devices("UCX_NET_DEVICES", "lo");
    for (std::size_t bad : {std::size_t{65536}, std::size_t{1} << 20, std::size_t{512}}) {
        ucx::context_options o;
        o.shared_memory_segment_size = bad;
        ucx::error_code ec;
        ucx::context ctx(o, ec);
        EXPECT_EQ(ec, make_error_code(ucx::error::invalid_option)) << bad;
        EXPECT_EQ(ctx.native_handle(), nullptr) << bad;
        EXPECT_THROW(ucx::context{o}, boost::system::system_error) << bad;
    }
    // The bounds themselves, and 0 (UCX's default), are fine.
    for (std::size_t good : {std::size_t{0}, ucx::min_shared_memory_segment_size,
                             ucx::max_shared_memory_segment_size}) {
        ucx::context_options o;
        o.shared_memory_segment_size = good;
        ucx::error_code ec;
        ucx::context ctx(o, ec);
        EXPECT_FALSE(ec) << good << ": " << ec.message();
    }
}

TEST(ConfigContext, InvalidSettingFailsWithErrorCode) {
    ucx::context_options o;
    o.config = {{"RNDV_THRESH", "not-a-size"}};
    ucx::error_code ec;
    ucx::context ctx(o, ec);
    EXPECT_TRUE(ec);
    EXPECT_EQ(ctx.native_handle(), nullptr);
    EXPECT_THROW(ucx::context{o}, boost::system::system_error);
}

} // namespace

TEST(ConfigSettings, NegatedTlsListsDecideAboutSharedMemory) {
    auto mm_default = [](const char* tls) {
        fake_env env;
        env.vars["UCX_TLS"] = tls;
        return value_of(env.run(ucx::context_options{}), "MM_ERROR_HANDLING").value_or("");
    };
    EXPECT_EQ(mm_default("^tcp"), "y");
    EXPECT_EQ(mm_default("^posix"), "y"); // sysv is still there
    EXPECT_EQ(mm_default("^mm"), "");
    EXPECT_EQ(mm_default("^sm"), "");
    EXPECT_EQ(mm_default("^posix,sysv"), "");
    EXPECT_EQ(mm_default("posix,self"), "y");
    EXPECT_EQ(mm_default("tcp,self"), "");

    fake_env env;
    ucx::context_options o;
    o.config["TLS"] = "^sm";
    EXPECT_FALSE(value_of(env.run(o), "MM_ERROR_HANDLING").has_value());
}

TEST(ConfigSettings, TransportSwitchesOverrideTheEnvironmentsTlsList) {
    fake_env env;
    env.vars["UCX_TLS"] = "tcp";
    ucx::context_options o;
    o.transports.tcp = false; // TLS becomes "^tcp": shared memory is in
    const auto s = env.run(o);
    EXPECT_EQ(value_of(s, "TLS"), "^tcp");
    EXPECT_EQ(value_of(s, "MM_ERROR_HANDLING"), "y");
}

TEST(UcxVersion, BuildAndRuntimeVersionsAreKnownAndCompare) {
    const ucx::ucx_version built = ucx::ucx_build_version();
    const ucx::ucx_version running = ucx::ucx_runtime_version();
    // UCX 1.x; the build's version is pkg-config's, the running one UCX's own.
    EXPECT_EQ(built.major, 1u);
    EXPECT_EQ(running.major, 1u);
    EXPECT_GE(running.minor, 13u);
    // The tests run against the UCX they were built with.
    EXPECT_EQ(built, running) << built.to_string() << " vs " << running.to_string();
    unsigned digits = 0;
    for (char c : running.to_string())
        digits += (c >= '0' && c <= '9');
    EXPECT_GE(digits, 3u);
    EXPECT_EQ((ucx::ucx_version{1, 13, 1}).to_string(), "1.13.1");
    EXPECT_LT((ucx::ucx_version{1, 13, 1}), (ucx::ucx_version{1, 14, 0}));
    EXPECT_LT((ucx::ucx_version{1, 9, 9}), (ucx::ucx_version{1, 13, 0}));
}

TEST(LibraryVersion, TheLibraryIsTheReleaseItsHeadersSay) {
    EXPECT_EQ(ucx::library_version(), UCX_ASIO_VERSION);
    EXPECT_EQ(UCX_ASIO_VERSION, UCX_ASIO_VERSION_MAJOR * 10000 + UCX_ASIO_VERSION_MINOR * 100 +
                                    UCX_ASIO_VERSION_PATCH);
    // The build's own version (CMake's, read from the header) is the same.
    EXPECT_STREQ(UCX_ASIO_TEST_PROJECT_VERSION, (std::to_string(UCX_ASIO_VERSION_MAJOR) + "." +
                                                 std::to_string(UCX_ASIO_VERSION_MINOR) + "." +
                                                 std::to_string(UCX_ASIO_VERSION_PATCH))
                                                    .c_str());
}
