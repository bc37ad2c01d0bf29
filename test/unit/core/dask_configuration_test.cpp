// Dask's configuration of UCX with distributed-ucxx's meaning: the examples of
// distributed-ucxx's README and dask-cuda's documented variables verbatim,
// checked against the UCX settings distributed-ucxx makes of them; both
// schemas and the oldest one; the precedence of files, DASK_* variables and
// UCX_* variables; sizes as Dask parses them; and every error naming its key.
#include <ucx/configuration.hpp>

#include "core/dask_configuration.hpp"

#include <boost/system/system_error.hpp>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using ucx::context_options;

// Sets environment variables for one test and restores them after.
struct scoped_env {
    std::vector<std::pair<std::string, std::optional<std::string>>> saved;
    void set(const std::string& name, const std::string& value) {
        remember(name);
        ::setenv(name.c_str(), value.c_str(), 1);
    }
    void unset(const std::string& name) {
        remember(name);
        ::unsetenv(name.c_str());
    }
    void remember(const std::string& name) {
        const char* v = std::getenv(name.c_str());
        saved.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
    }
    ~scoped_env() {
        for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
            if (it->second)
                ::setenv(it->first.c_str(), it->second->c_str(), 1);
            else
                ::unsetenv(it->first.c_str());
        }
    }
};

// A YAML file of `text` in /tmp, removed with the object.
struct yaml_file {
    std::string path;
    explicit yaml_file(const std::string& text, const char* suffix = ".yaml") {
        std::string name = std::string("/tmp/ucx-dask-XXXXXX") + suffix;
        const int fd = ::mkstemps(name.data(), static_cast<int>(std::string(suffix).size()));
        EXPECT_GE(fd, 0);
        std::FILE* f = ::fdopen(fd, "w");
        std::fputs(text.c_str(), f);
        std::fclose(f);
        path = name;
    }
    ~yaml_file() { std::remove(path.c_str()); }
};

// The UCX settings a context of `o` applies (name without UCX_ -> value), in an
// environment where no UCX_* variable is set.
std::map<std::string, std::string> settings_of(const context_options& o) {
    std::map<std::string, std::string> out;
    for (auto& [k, v] :
         ucx::make_config_settings(o, [](const char*) -> const char* { return nullptr; }))
        out[k] = v;
    return out;
}

struct applied {
    context_options options;
    ucx::error_code ec;
    std::string failed;
    std::vector<std::string> notes;
};

applied apply(const std::vector<std::string>& files) {
    applied a;
    ucx::apply_dask_configuration(a.options, files, a.ec, &a.failed, &a.notes);
    return a;
}

// No DASK_* or UCX_TLS variable of the test's own environment leaks in.
class DaskConfiguration : public ::testing::Test {
protected:
    scoped_env env;
    void SetUp() override {
        std::vector<std::string> names;
        for (char** e = environ; e && *e; ++e) {
            const std::string var(*e);
            const std::string name = var.substr(0, var.find('='));
            if (name.rfind("DASK_", 0) == 0 || name == "UCX_TLS" ||
                name == "UCX_SOCKADDR_TLS_PRIORITY" || name == "UCX_LOG_LEVEL" ||
                name == "UCX_RNDV_THRESH")
                names.push_back(name);
        }
        for (const auto& n : names)
            env.unset(n);
    }
};

// distributed-ucxx's README, "Configuration", the YAML example (verbatim).
constexpr const char* readme_yaml = R"(distributed-ucxx:
  tcp: true
  nvlink: true
  infiniband: false
  cuda-copy: true
  create-cuda-context: true
  multi-buffer: false
  environment:
    log-level: "info"
  rmm:
    pool-size: "1GB"
)";

// The same README's legacy schema (verbatim).
constexpr const char* readme_legacy_yaml = R"(distributed:
  comm:
    ucx:
      tcp: true
      nvlink: true
      infiniband: false
      cuda-copy: true
      create-cuda-context: true
      multi-buffer: false
      environment:
        log-level: "info"
      rmm:
        pool-size: "1GB"
)";

TEST_F(DaskConfiguration, TheReadmeExampleGivesDistributedUcxxsSettings) {
    const yaml_file file(readme_yaml);
    const applied a = apply({file.path});
    ASSERT_FALSE(a.ec) << a.failed;
    // distributed-ucxx's _prepare_ucx_config: tcp, then cuda_copy (nvlink or
    // cuda-copy), then cuda_ipc (nvlink); no rc (infiniband false).
    const auto s = settings_of(a.options);
    EXPECT_EQ(s.at("TLS"), "tcp,cuda_copy,cuda_ipc");
    EXPECT_EQ(s.at("SOCKADDR_TLS_PRIORITY"), "tcp");
    EXPECT_EQ(s.at("LOG_LEVEL"), "info");
    EXPECT_TRUE(a.options.cuda.create_context);
    EXPECT_EQ(a.options.cuda.pool_size, 1'000'000'000u); // Dask's GB: 10^9
    // Shared memory is not in the list: none of its settings.
    EXPECT_FALSE(s.contains("MM_ERROR_HANDLING"));
    EXPECT_TRUE(a.notes.empty()) << a.notes.front();
}

TEST_F(DaskConfiguration, TheLegacySchemaOfTheReadmeReadsAsDistributedUcxxReadsIt) {
    const yaml_file file(readme_legacy_yaml);
    const applied a = apply({file.path});
    ASSERT_FALSE(a.ec) << a.failed;
    const auto s = settings_of(a.options);
    EXPECT_EQ(s.at("TLS"), "tcp,cuda_copy,cuda_ipc");
    EXPECT_EQ(s.at("SOCKADDR_TLS_PRIORITY"), "tcp");
    EXPECT_EQ(s.at("LOG_LEVEL"), "info");
    EXPECT_TRUE(a.options.cuda.create_context);
    // distributed-ucxx reads the former pool size at distributed.rmm, not
    // under distributed.comm.ucx: not read, and said so.
    EXPECT_EQ(a.options.cuda.pool_size, 0u);
    ASSERT_EQ(a.notes.size(), 1u);
    EXPECT_NE(a.notes[0].find("distributed.comm.ucx.rmm"), std::string::npos) << a.notes[0];
    EXPECT_NE(a.notes[0].find(file.path + ":13"), std::string::npos) << a.notes[0];
}

TEST_F(DaskConfiguration, DistributedUcxxsOwnDefaultsChangeNothing) {
    // distributed_ucxx/distributed-ucxx.yaml (verbatim).
    const yaml_file file(R"(distributed-ucxx:
  version: 1

  cuda-copy: null            # enable cuda-copy
  tcp: null                  # enable tcp
  nvlink: null               # enable cuda_ipc
  infiniband: null           # enable Infiniband
  rdmacm: null               # enable RDMACM
  create-cuda-context: null  # create CUDA context before UCX initialization
  multi-buffer: null         # enable multi-buffer send/recv interface
  environment: {}            # Any other environment settings to
                             # be transferred to UCX. Name
                             # munging: key-name => UCX_KEY_NAME

  # RMM Configuration
  rmm:
    pool-size: null  # Initial RMM pool size (e.g., "1GB", "500MB")
)");
    const applied a = apply({file.path});
    ASSERT_FALSE(a.ec) << a.failed;
    EXPECT_EQ(settings_of(a.options), settings_of(context_options{}));
    EXPECT_FALSE(a.options.cuda.create_context);
    EXPECT_TRUE(a.notes.empty());
}

TEST_F(DaskConfiguration, TheReadmesVariablesInBothSchemas) {
    for (const char* prefix : {"DASK_DISTRIBUTED_UCXX__", "DASK_DISTRIBUTED__COMM__UCX__"}) {
        SCOPED_TRACE(prefix);
        scoped_env vars;
        vars.set(std::string(prefix) + "TCP", "true");
        vars.set(std::string(prefix) + "NVLINK", "true");
        vars.set(std::string(prefix) == "DASK_DISTRIBUTED_UCXX__"
                     ? "DASK_DISTRIBUTED_UCXX__RMM__POOL_SIZE"
                     : "DASK_DISTRIBUTED__RMM__POOL_SIZE",
                 "1GB");
        const applied a = apply({});
        ASSERT_FALSE(a.ec) << a.failed;
        const auto s = settings_of(a.options);
        EXPECT_EQ(s.at("TLS"), "tcp,cuda_copy,cuda_ipc");
        EXPECT_EQ(s.at("SOCKADDR_TLS_PRIORITY"), "tcp");
        // A CUDA transport in UCX_TLS makes the CUDA context.
        EXPECT_TRUE(a.options.cuda.create_context);
        EXPECT_EQ(a.options.cuda.pool_size, 1'000'000'000u);
    }
}

TEST_F(DaskConfiguration, DaskCudasDocumentedVariables) {
    struct row {
        const char* where;
        std::vector<std::pair<const char*, const char*>> vars;
        const char* tls; // null: not set, UCX chooses
        const char* priority;
        bool cuda_context;
        std::size_t pool_size;
        std::vector<std::string> net_devices;
    };
    const row rows[] = {
        {"docs/source/examples/ucx.rst, the scheduler with manual transports",
         {{"DASK_DISTRIBUTED_UCXX__CUDA_COPY", "True"},
          {"DASK_DISTRIBUTED_UCXX__TCP", "True"},
          {"DASK_DISTRIBUTED_UCXX__NVLINK", "True"},
          {"DASK_DISTRIBUTED_UCXX__INFINIBAND", "True"},
          {"DASK_DISTRIBUTED_UCXX__RDMACM", "True"},
          {"DASK_DISTRIBUTED_UCXX__RMM__POOL_SIZE", "1GB"}},
         "rc,tcp,cuda_copy,cuda_ipc",
         "rdmacm",
         true,
         1'000'000'000,
         {}},
        {"the same page, automatic transports",
         {{"DASK_DISTRIBUTED_UCXX__CREATE_CUDA_CONTEXT", "True"},
          {"DASK_DISTRIBUTED_UCXX__RMM__POOL_SIZE", "1GB"}},
         nullptr,
         nullptr,
         true,
         1'000'000'000,
         {}},
        {"examples/ucx/dask_cuda_worker.sh and the docs before distributed-ucxx",
         {{"DASK_DISTRIBUTED__COMM__UCX__CREATE_CUDA_CONTEXT", "True"},
          {"DASK_DISTRIBUTED__COMM__UCX__CUDA_COPY", "True"},
          {"DASK_DISTRIBUTED__COMM__UCX__TCP", "True"},
          {"DASK_DISTRIBUTED__COMM__UCX__INFINIBAND", "True"},
          {"DASK_DISTRIBUTED__RMM__POOL_SIZE", "5000M"}},
         "rc,tcp,cuda_copy",
         "tcp",
         true,
         5'000'000'000,
         {}},
        {"the oldest section, of Distributed's first UCX releases",
         {{"DASK_UCX__TCP", "True"},
          {"DASK_UCX__CUDA_COPY", "True"},
          {"DASK_UCX__NET_DEVICES", "lo"}},
         "tcp,cuda_copy",
         "tcp",
         true,
         0,
         {"lo"}},
    };
    for (const row& r : rows) {
        SCOPED_TRACE(r.where);
        scoped_env vars;
        for (const auto& [name, value] : r.vars)
            vars.set(name, value);
        const applied a = apply({});
        ASSERT_FALSE(a.ec) << a.failed;
        const auto s = settings_of(a.options);
        if (r.tls) {
            EXPECT_EQ(s.at("TLS"), r.tls);
            EXPECT_EQ(s.at("SOCKADDR_TLS_PRIORITY"), r.priority);
        } else {
            EXPECT_FALSE(s.contains("TLS"));
        }
        EXPECT_EQ(a.options.cuda.create_context, r.cuda_context);
        EXPECT_EQ(a.options.cuda.pool_size, r.pool_size);
        EXPECT_EQ(a.options.net_devices, r.net_devices);
    }
}

TEST_F(DaskConfiguration, TheSwitchesAloneAndTogether) {
    struct row {
        std::map<std::string, std::string> vars;
        const char* tls; // null: not set
        const char* priority;
    };
    const row rows[] = {
        {{{"TCP", "True"}}, "tcp", "tcp"},
        {{{"TCP", "True"}, {"CUDA_COPY", "True"}}, "tcp,cuda_copy", "tcp"},
        {{{"NVLINK", "True"}}, "tcp,cuda_copy,cuda_ipc", "tcp"},
        {{{"INFINIBAND", "True"}}, "rc,tcp", "tcp"},
        {{{"INFINIBAND", "True"}, {"RDMACM", "True"}}, "rc,tcp", "rdmacm"},
        {{{"TCP", "False"}}, nullptr, nullptr},
        {{{"TCP", "0"}, {"NVLINK", "None"}}, nullptr, nullptr},
        {{{"TCP", "1"}}, "tcp", "tcp"}, // a number, as Python's truth
        {{{"CUDA_COPY", "True"}}, nullptr, nullptr},
    };
    for (const row& r : rows) {
        scoped_env vars;
        std::string trace;
        for (const auto& [k, v] : r.vars) {
            vars.set("DASK_DISTRIBUTED_UCXX__" + k, v);
            trace += k + "=" + v + " ";
        }
        SCOPED_TRACE(trace);
        const applied a = apply({});
        ASSERT_FALSE(a.ec) << a.failed;
        const auto s = settings_of(a.options);
        if (r.tls) {
            EXPECT_EQ(s.at("TLS"), r.tls);
            EXPECT_EQ(s.at("SOCKADDR_TLS_PRIORITY"), r.priority);
        } else {
            EXPECT_FALSE(s.contains("TLS"));
            EXPECT_FALSE(s.contains("SOCKADDR_TLS_PRIORITY"));
        }
    }
}

TEST_F(DaskConfiguration, PrecedenceOfFilesVariablesAndSchemas) {
    const yaml_file first("distributed-ucxx:\n  tcp: true\n  environment:\n    rndv-thresh: 16k\n");
    const yaml_file second("distributed-ucxx:\n  environment:\n    rndv_thresh: 32k\n");
    {
        // A later file over an earlier one; `_` and `-` are one key.
        const applied a = apply({first.path, second.path});
        ASSERT_FALSE(a.ec) << a.failed;
        EXPECT_EQ(a.options.config.at("RNDV_THRESH"), "32k");
        EXPECT_EQ(a.options.config.at("TLS"), "tcp");
    }
    {
        // The variables over the files.
        scoped_env vars;
        vars.set("DASK_DISTRIBUTED_UCXX__TCP", "False");
        vars.set("DASK_DISTRIBUTED_UCXX__ENVIRONMENT__RNDV_THRESH", "8k");
        const applied a = apply({first.path, second.path});
        ASSERT_FALSE(a.ec) << a.failed;
        EXPECT_EQ(a.options.config.at("RNDV_THRESH"), "8k");
        EXPECT_FALSE(a.options.config.contains("TLS"));
    }
    {
        // A null key of the new section falls back to the former section; a
        // false one does not.
        const yaml_file both(R"(distributed-ucxx:
  tcp: null
  nvlink: false
distributed:
  comm:
    ucx:
      tcp: true
      nvlink: true
)");
        const applied a = apply({both.path});
        ASSERT_FALSE(a.ec) << a.failed;
        EXPECT_EQ(a.options.config.at("TLS"), "tcp");
    }
    {
        // An environment as a Python dict literal.
        scoped_env vars;
        vars.set("DASK_DISTRIBUTED_UCXX__ENVIRONMENT",
                 R"({"rndv-thresh": "4k", 'max_rndv_rails': 1})");
        const applied a = apply({});
        ASSERT_FALSE(a.ec) << a.failed;
        EXPECT_EQ(a.options.config.at("RNDV_THRESH"), "4k");
        EXPECT_EQ(a.options.config.at("MAX_RNDV_RAILS"), "1");
    }
}

TEST_F(DaskConfiguration, TheUcxEnvironmentWinsAndWhatHasNoEffectIsSaid) {
    env.set("UCX_TLS", "tcp,self");
    env.set("UCX_RNDV_THRESH", "1m");
    const yaml_file file(R"(distributed-ucxx:
  tcp: true
  nvlink: true
  multi-buffer: true
  connect-timeout: 30
  environment:
    rndv-thresh: 8k
    sockaddr-tls-priority: rdmacm
    max-rndv-rails: 1
)");
    const applied a = apply({file.path});
    ASSERT_FALSE(a.ec) << a.failed;
    // UCX_TLS of the environment wins over the switches; UCX_RNDV_THRESH
    // over `environment`; the switches over `environment`.
    EXPECT_FALSE(a.options.config.contains("TLS"));
    EXPECT_EQ(a.options.config.at("SOCKADDR_TLS_PRIORITY"), "tcp");
    EXPECT_FALSE(a.options.config.contains("RNDV_THRESH"));
    EXPECT_EQ(a.options.config.at("MAX_RNDV_RAILS"), "1");
    // The context is made for the environment's UCX_TLS, which has no CUDA.
    EXPECT_FALSE(a.options.cuda.create_context);
    std::string all;
    for (const auto& n : a.notes)
        all += n + "\n";
    EXPECT_EQ(a.notes.size(), 5u) << all;
    for (const char* key :
         {"distributed-ucxx.tcp: UCX_TLS=tcp,cuda_copy,cuda_ipc not set",
          "distributed-ucxx.environment.rndv-thresh: not set: the environment's UCX_RNDV_THRESH",
          "distributed-ucxx.environment.sockaddr-tls-priority: not set: SOCKADDR_TLS_PRIORITY=tcp",
          "distributed-ucxx.multi-buffer: no effect",
          "distributed-ucxx.connect-timeout: no effect"})
        EXPECT_NE(all.find(key), std::string::npos) << key << "\n" << all;
}

TEST_F(DaskConfiguration, EveryErrorNamesItsKeyAndChangesNothing) {
    struct row {
        const char* yaml;
        ucx::error_code expected;
        const char* named;
    };
    const row rows[] = {
        {"distributed-ucxx:\n  tpc: true\n", ucx::error::unknown_option,
         ":2: distributed-ucxx.tpc"},
        {"distributed-ucxx:\n  tcp: maybe\n", ucx::error::invalid_option,
         ":2: distributed-ucxx.tcp"},
        {"distributed-ucxx:\n  environment:\n    rndv-tresh: 8k\n", ucx::error::unknown_option,
         ":3: distributed-ucxx.environment.rndv-tresh: UCX_RNDV_TRESH is not a setting"},
        {"distributed-ucxx:\n  rmm:\n    pool-size: 1XB\n", ucx::error::invalid_option,
         ":3: distributed-ucxx.rmm.pool-size: 1XB"},
        {"distributed-ucxx:\n  rmm:\n    poolsize: 1GB\n", ucx::error::unknown_option,
         ":3: distributed-ucxx.rmm.poolsize"},
        {"distributed-ucxx:\n  environment: 8k\n", ucx::error::invalid_option,
         ":2: distributed-ucxx.environment"},
        {"distributed-ucxx:\n  tcp: [true\n", ucx::error::invalid_option, ":"},
        {"- a list\n", ucx::error::invalid_option, ":1: not a YAML map"},
    };
    for (const row& r : rows) {
        SCOPED_TRACE(r.yaml);
        const yaml_file file(r.yaml);
        context_options o;
        o.config["RNDV_THRESH"] = "64k";
        ucx::error_code ec;
        std::string failed;
        ucx::apply_dask_configuration(o, std::vector<std::string>{file.path}, ec, &failed);
        EXPECT_EQ(ec, r.expected) << ec.message() << ": " << failed;
        EXPECT_EQ(failed.rfind(file.path, 0), 0u) << failed;
        EXPECT_NE(failed.find(r.named), std::string::npos) << failed;
        EXPECT_EQ(o.config, (std::map<std::string, std::string>{{"RNDV_THRESH", "64k"}}));
    }
    {
        // A variable is named by itself.
        scoped_env vars;
        vars.set("DASK_DISTRIBUTED_UCXX__TPC", "True");
        const applied a = apply({});
        EXPECT_EQ(a.ec, ucx::error::unknown_option);
        EXPECT_NE(a.failed.find("DASK_DISTRIBUTED_UCXX__TPC=True: distributed-ucxx.tpc"),
                  std::string::npos)
            << a.failed;
    }
    {
        ucx::error_code ec;
        std::string failed;
        context_options o;
        ucx::apply_dask_configuration(o, std::vector<std::string>{"/nonexistent/dask.yaml"}, ec,
                                      &failed);
        EXPECT_EQ(ec, boost::system::errc::no_such_file_or_directory);
        EXPECT_EQ(failed, "/nonexistent/dask.yaml");
    }
    // Other sections of a Dask file are Dask's, not looked at.
    const yaml_file other("distributed:\n  scheduler:\n    work-stealing: true\n  comm:\n"
                          "    timeouts:\n      connect: 30s\n");
    EXPECT_FALSE(apply({other.path}).ec);
}

TEST_F(DaskConfiguration, AConfiguredContextTakesAYamlFileAndDasksVariables) {
    const yaml_file file(readme_yaml, ".conf"); // YAML by its first line
    EXPECT_TRUE(ucx::is_yaml_configuration_file(file.path));
    env.set("DASK_DISTRIBUTED_UCXX__NVLINK", "False");
    env.set("UCXTEST_NET_DEVICES", "lo");
    std::vector<std::string> notes;
    const context_options o = ucx::configured_context_options(file.path, "UCXTEST_", &notes);
    EXPECT_EQ(o.config.at("TLS"), "tcp,cuda_copy");
    EXPECT_EQ(o.config.at("LOG_LEVEL"), "info");
    EXPECT_EQ(o.net_devices, std::vector<std::string>{"lo"});
    EXPECT_TRUE(notes.empty());
    // A Dask variable with a `name = value` file.
    const yaml_file plain("tcp = false\n", ".conf");
    EXPECT_FALSE(ucx::is_yaml_configuration_file(plain.path));
    const context_options p = ucx::configured_context_options(plain.path, "UCXTEST_");
    EXPECT_FALSE(p.transports.tcp);
    EXPECT_FALSE(p.config.contains("TLS")); // nvlink false alone asks nothing
    env.set("DASK_DISTRIBUTED_UCXX__TCP", "yes please");
    try {
        (void)ucx::configured_context_options(plain.path, "UCXTEST_");
        ADD_FAILURE() << "no exception";
    } catch (const boost::system::system_error& e) {
        EXPECT_EQ(e.code(), ucx::error::invalid_option);
        EXPECT_NE(std::string(e.what()).find("DASK_DISTRIBUTED_UCXX__TCP=yes please"),
                  std::string::npos)
            << e.what();
    }
}

TEST(DaskSizes, AsDasksParseBytes) {
    // dask.utils.parse_bytes's doctests, and the decimal and binary units.
    const std::pair<const char*, std::size_t> rows[] = {
        {"100 MB", 100'000'000},
        {"100M", 100'000'000},
        {"5kB", 5'000},
        {"5.4 kB", 5'400},
        {"1kiB", 1'024},
        {"1e6", 1'000'000},
        {"1e6 kB", 1'000'000'000},
        {"MB", 1'000'000},
        {"123", 123},
        {"1GB", 1'000'000'000},
        {"1G", 1'000'000'000},
        {"1gb", 1'000'000'000},
        {"1GiB", 1u << 30},
        {"1Gi", 1u << 30},
        {"500MB", 500'000'000},
        {"1000.00 MB", 1'000'000'000},
        {"4GB", 4'000'000'000},
        {"1 b", 1},
        {".5GB", 500'000'000},
    };
    for (const auto& [text, bytes] : rows) {
        std::size_t n = 0;
        EXPECT_TRUE(ucx::detail::parse_dask_bytes(text, n)) << text;
        EXPECT_EQ(n, bytes) << text;
    }
    for (const char* bad : {"5 foos", "-1GB", "1XB", "1e400", "GB1"}) {
        std::size_t n = 0;
        EXPECT_FALSE(ucx::detail::parse_dask_bytes(bad, n)) << bad;
    }
}

TEST(DaskValues, AsDasksInterpretValue) {
    using kind = ucx::detail::dask_value::kind;
    auto v = [](const char* text) { return ucx::detail::interpret_dask_value(text, "X"); };
    EXPECT_EQ(v("True").type, kind::boolean);
    EXPECT_TRUE(v("True").boolean);
    EXPECT_TRUE(v("true").boolean);
    EXPECT_EQ(v("FALSE").type, kind::boolean);
    EXPECT_FALSE(v("FALSE").boolean);
    EXPECT_EQ(v("None").type, kind::null);
    EXPECT_EQ(v("null").type, kind::null);
    EXPECT_EQ(v("8192").type, kind::integer);
    EXPECT_EQ(v("8192").integer, 8192);
    EXPECT_EQ(v("1e9").type, kind::real);
    EXPECT_EQ(v("'quoted'").text, "quoted");
    EXPECT_EQ(v("1GB").type, kind::string);
    EXPECT_EQ(v("yes").type, kind::string); // not one of Python's or Dask's words
    const auto map = v(R"({"a-b": "x", 'c_d': 2})");
    ASSERT_EQ(map.type, kind::map);
    EXPECT_EQ(map.entries.at("a-b").text, "x");
    EXPECT_EQ(map.entries.at("c-d").integer, 2);
}

TEST(UcxSettings, AMisspeltSettingIsAnErrorEverywhere) {
    context_options o;
    EXPECT_FALSE(ucx::set_context_option(o, "environment__rndv-thresh", "8k"));
    EXPECT_EQ(o.config.at("RNDV_THRESH"), "8k");
    EXPECT_FALSE(ucx::set_context_option(o, "environment__TCP_TX_SEG_SIZE", "16k"));
    EXPECT_FALSE(ucx::set_context_option(o, "environment__MM_SEG_SIZE", "16k"));
    EXPECT_FALSE(ucx::set_context_option(o, "environment__SEG_SIZE", "16k"));
    EXPECT_EQ(ucx::set_context_option(o, "environment__RNDV_TRESH", "8k"),
              ucx::error::unknown_option);
    EXPECT_EQ(ucx::set_context_option(o, "environment__TPC_TX_SEG_SIZE", "8k"),
              ucx::error::unknown_option);
    EXPECT_FALSE(o.config.contains("RNDV_TRESH"));
    // A context refuses one too, instead of running without it.
    context_options c;
    c.config["RNDV_TRESH"] = "8k";
    ucx::error_code ec;
    ucx::context ctx(c, ec);
    EXPECT_EQ(ec, ucx::error::unknown_option);
}

} // namespace
