// context_options from named settings: every option, bad names and values,
// the environment with a prefix, a configuration file, and their precedence.
#include <ucx/configuration.hpp>

#include <boost/system/system_error.hpp>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace {

using ucx::context_options;
using ucx::set_context_option;

TEST(Configuration, EveryTransportSwitch) {
    context_options o;
    EXPECT_FALSE(set_context_option(o, "tcp", "false"));
    EXPECT_FALSE(set_context_option(o, "shared_memory", "no"));
    EXPECT_FALSE(set_context_option(o, "cma", "off"));
    EXPECT_FALSE(set_context_option(o, "infiniband", "0"));
    EXPECT_FALSE(set_context_option(o, "cuda_copy", "FALSE"));
    EXPECT_FALSE(set_context_option(o, "nvlink", "No"));
    EXPECT_FALSE(o.transports.tcp);
    EXPECT_FALSE(o.transports.shared_memory);
    EXPECT_FALSE(o.transports.cma);
    EXPECT_FALSE(o.transports.rdma);
    EXPECT_FALSE(o.transports.cuda_copy);
    EXPECT_FALSE(o.transports.nvlink);
    EXPECT_FALSE(set_context_option(o, "TCP", " true "));
    EXPECT_FALSE(set_context_option(o, "nvlink", "yes"));
    EXPECT_FALSE(set_context_option(o, "cma", "on"));
    EXPECT_FALSE(set_context_option(o, "infiniband", "1"));
    EXPECT_TRUE(o.transports.tcp);
    EXPECT_TRUE(o.transports.nvlink);
    EXPECT_TRUE(o.transports.cma);
    EXPECT_TRUE(o.transports.rdma);
}

TEST(Configuration, EveryOtherOption) {
    context_options o;
    EXPECT_FALSE(set_context_option(o, "net_devices", "mlx5_0:1, lo"));
    EXPECT_EQ(o.net_devices, (std::vector<std::string>{"mlx5_0:1", "lo"}));
    EXPECT_FALSE(set_context_option(o, "net_devices", ""));
    EXPECT_TRUE(o.net_devices.empty());
    EXPECT_FALSE(set_context_option(o, "shared_memory_error_handling", "false"));
    EXPECT_FALSE(o.shared_memory_error_handling);
    EXPECT_FALSE(set_context_option(o, "shared_memory_segment_size", "16448"));
    EXPECT_EQ(o.shared_memory_segment_size, 16448u);
    EXPECT_FALSE(set_context_option(o, "ucx_keepalive", "true"));
    EXPECT_TRUE(o.ucx_keepalive);
    EXPECT_FALSE(set_context_option(o, "estimated_endpoints", "4096"));
    EXPECT_EQ(o.estimated_endpoints, 4096u);
    EXPECT_FALSE(set_context_option(o, "multi_threaded", "true"));
    EXPECT_TRUE(o.multi_threaded);
    EXPECT_FALSE(set_context_option(o, "environment__rndv_thresh", "8k"));
    EXPECT_FALSE(set_context_option(o, "ENVIRONMENT__TLS", "tcp,self"));
    EXPECT_EQ(o.config.at("RNDV_THRESH"), "8k");
    EXPECT_EQ(o.config.at("TLS"), "tcp,self");
}

TEST(Configuration, BadNamesAndValuesAreErrorsAndChangeNothing) {
    context_options o;
    EXPECT_EQ(set_context_option(o, "tpc", "true"), ucx::error::unknown_option);
    EXPECT_EQ(set_context_option(o, "environment__", "x"), ucx::error::unknown_option);
    EXPECT_EQ(set_context_option(o, "", "x"), ucx::error::unknown_option);
    EXPECT_EQ(set_context_option(o, "tcp", "maybe"), ucx::error::invalid_option);
    EXPECT_EQ(set_context_option(o, "tcp", ""), ucx::error::invalid_option);
    EXPECT_EQ(set_context_option(o, "shared_memory_segment_size", "1023"),
              ucx::error::invalid_option);
    EXPECT_EQ(set_context_option(o, "shared_memory_segment_size", "65536"),
              ucx::error::invalid_option);
    EXPECT_EQ(set_context_option(o, "shared_memory_segment_size", "32k"),
              ucx::error::invalid_option);
    EXPECT_EQ(set_context_option(o, "estimated_endpoints", "-1"), ucx::error::invalid_option);
    EXPECT_EQ(set_context_option(o, "net_devices", "lo,,eth0"), ucx::error::invalid_option);
    EXPECT_EQ(set_context_option(o, "net_devices", "lo,"), ucx::error::invalid_option);
    const context_options defaults;
    EXPECT_EQ(o.transports.tcp, defaults.transports.tcp);
    EXPECT_EQ(o.shared_memory_segment_size, defaults.shared_memory_segment_size);
    EXPECT_EQ(o.estimated_endpoints, defaults.estimated_endpoints);
    EXPECT_TRUE(o.net_devices.empty());
    EXPECT_TRUE(o.config.empty());
    EXPECT_EQ(ucx::make_error_code(ucx::error::unknown_option).message(), "no such option");
}

// Sets environment variables for one test and removes them after.
struct scoped_env {
    std::vector<std::string> names;
    void set(const std::string& name, const std::string& value) {
        ::setenv(name.c_str(), value.c_str(), 1);
        names.push_back(name);
    }
    ~scoped_env() {
        for (const auto& n : names)
            ::unsetenv(n.c_str());
    }
};

TEST(Configuration, TheEnvironmentWithAPrefix) {
    scoped_env env;
    env.set("UCXTEST_TCP", "false");
    env.set("UCXTEST_NET_DEVICES", "lo");
    env.set("UCXTEST_ENVIRONMENT__RNDV_THRESH", "8k");
    env.set("UCXTEST_LOG", "info");                            // the log level, not an option
    env.set("UCXTEST_NCCL_LIBRARY", "/opt/nccl/libnccl.so.2"); // ucx::nccl's, not an option
    env.set("UCXTESTX_TCP", "maybe");                          // another prefix: not read
    context_options o;
    ucx::error_code ec;
    ucx::apply_environment(o, ec, "UCXTEST_");
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_FALSE(o.transports.tcp);
    EXPECT_EQ(o.net_devices, std::vector<std::string>{"lo"});
    EXPECT_EQ(o.config.at("RNDV_THRESH"), "8k");
}

TEST(Configuration, ABadVariableIsNamedAndChangesNothing) {
    scoped_env env;
    env.set("UCXTEST_TCP", "false");
    env.set("UCXTEST_SHARED_MEMORY", "perhaps");
    context_options o;
    ucx::error_code ec;
    std::string failed;
    ucx::apply_environment(o, ec, "UCXTEST_", &failed);
    EXPECT_EQ(ec, ucx::error::invalid_option);
    EXPECT_EQ(failed, "UCXTEST_SHARED_MEMORY=perhaps");
    EXPECT_TRUE(o.transports.tcp);
    ucx::apply_environment(o, ec, "");
    EXPECT_EQ(ec, ucx::error::invalid_option);
    env.set("UCXTEST_TSP", "true");
    ::unsetenv("UCXTEST_SHARED_MEMORY");
    ucx::apply_environment(o, ec, "UCXTEST_", &failed);
    EXPECT_EQ(ec, ucx::error::unknown_option);
    EXPECT_EQ(failed, "UCXTEST_TSP=true");
}

std::string write_file(const std::string& text) {
    char name[] = "/tmp/ucx-config-XXXXXX";
    const int fd = ::mkstemp(name);
    EXPECT_GE(fd, 0);
    std::FILE* f = ::fdopen(fd, "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    return name;
}

TEST(Configuration, AFileThenTheEnvironment) {
    const std::string path = write_file("# a comment\n"
                                        "\n"
                                        "  tcp = false\n"
                                        "shared_memory_segment_size=16448\n"
                                        "environment__RNDV_THRESH = 16k\n"
                                        "net_devices = lo\n");
    context_options o;
    ucx::error_code ec;
    ucx::apply_configuration_file(o, path, ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_FALSE(o.transports.tcp);
    EXPECT_EQ(o.shared_memory_segment_size, 16448u);
    EXPECT_EQ(o.config.at("RNDV_THRESH"), "16k");
    // The environment wins over the file.
    scoped_env env;
    env.set("UCXTEST_TCP", "true");
    env.set("UCXTEST_ENVIRONMENT__RNDV_THRESH", "8k");
    const context_options c = ucx::configured_context_options(path, "UCXTEST_");
    EXPECT_TRUE(c.transports.tcp);
    EXPECT_EQ(c.shared_memory_segment_size, 16448u);
    EXPECT_EQ(c.config.at("RNDV_THRESH"), "8k");
    EXPECT_EQ(c.net_devices, std::vector<std::string>{"lo"});
    std::remove(path.c_str());
}

TEST(Configuration, ABadFileLineIsNamed) {
    const std::string path = write_file("tcp = false\nshared_memory\n");
    context_options o;
    ucx::error_code ec;
    std::string failed;
    ucx::apply_configuration_file(o, path, ec, &failed);
    EXPECT_EQ(ec, ucx::error::invalid_option);
    EXPECT_EQ(failed, path + ":2: shared_memory");
    EXPECT_TRUE(o.transports.tcp); // unchanged
    try {
        (void)ucx::configured_context_options(path, "UCXTEST_");
        ADD_FAILURE() << "no exception";
    } catch (const boost::system::system_error& e) {
        EXPECT_EQ(e.code(), ucx::error::invalid_option);
        EXPECT_NE(std::string(e.what()).find(":2: shared_memory"), std::string::npos) << e.what();
    }
    std::remove(path.c_str());
    ucx::apply_configuration_file(o, path, ec, &failed);
    EXPECT_EQ(ec, boost::system::errc::no_such_file_or_directory) << ec.message();
    EXPECT_EQ(failed, path);
}

TEST(Configuration, AConfiguredContextWorks) {
    scoped_env env;
    env.set("UCXTEST_SHARED_MEMORY", "false");
    env.set("UCXTEST_NET_DEVICES", "lo");
    const context_options o = ucx::configured_context_options({}, "UCXTEST_");
    ucx::context ctx(o);
    EXPECT_NE(ctx.native_handle(), nullptr);
    bool tls_set = false;
    for (const auto& [name, value] : ucx::make_config_settings(
             o, [](const char*) { return static_cast<const char*>(nullptr); }))
        tls_set |= name == "TLS" && value.find("mm") != std::string::npos;
    EXPECT_TRUE(tls_set) << "shared memory was not switched off";
}

} // namespace

// The registry of the library's variables: the launch and store variables
// (and the log level, the NCCL library) are left to their readers, with the
// default prefix and another; a name that is neither an option nor in the
// registry still fails, and is named.
TEST(Configuration, TheLaunchAndStoreVariablesAreNotOptions) {
    scoped_env env;
    for (const ucx::environment_variable& v : ucx::library_environment) {
        EXPECT_EQ(v.name.substr(0, 8), "UCXASIO_") << v.name;
        EXPECT_FALSE(v.meaning.empty()) << v.name;
        env.set(std::string(v.name), "1");
        env.set("UCXTEST_" + std::string(v.name.substr(8)), "1");
    }
    for (const char* name : {"UCXASIO_RANK", "UCXASIO_SIZE", "UCXASIO_RENDEZVOUS",
                             "UCXASIO_STORE_DIR", "UCXASIO_STORE_SERVER", "UCXASIO_LOCAL_RANK"}) {
        EXPECT_NE(ucx::find_library_variable(std::string_view(name).substr(8)), nullptr) << name;
    }
    EXPECT_NE(ucx::find_library_variable("store_dir"), nullptr);
    EXPECT_EQ(ucx::find_library_variable("TCP"), nullptr);
    context_options o;
    ucx::error_code ec;
    std::string failed;
    ucx::apply_environment(o, ec, "UCXASIO_", &failed);
    EXPECT_FALSE(ec) << ec.message() << ": " << failed;
    ucx::apply_environment(o, ec, "UCXTEST_", &failed);
    EXPECT_FALSE(ec) << ec.message() << ": " << failed;
    EXPECT_NO_THROW((void)ucx::configured_context_options({}, "UCXASIO_"));

    env.set("UCXASIO_RANKS", "4"); // a misspelt name
    ucx::apply_environment(o, ec, "UCXASIO_", &failed);
    EXPECT_EQ(ec, ucx::error::unknown_option);
    EXPECT_EQ(failed, "UCXASIO_RANKS=4");
    try {
        (void)ucx::configured_context_options({}, "UCXASIO_");
        ADD_FAILURE() << "an unknown name was accepted";
    } catch (const boost::system::system_error& e) {
        EXPECT_NE(std::string(e.what()).find("UCXASIO_RANKS=4"), std::string::npos) << e.what();
    }
}
