// The fuzz targets' corpora (test/fuzz/corpus/<target>/) under the regular
// build: every input, among them every one that once broke a parser or a
// state machine, goes through its target's checks again, so the suite keeps
// them fixed without libFuzzer. A violated check aborts the test.
#include "fuzz.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

class fuzz_corpus : public testing::TestWithParam<ucx::fuzz::target> {};

std::vector<std::byte> read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<char> chars{std::istreambuf_iterator<char>(in),
                                  std::istreambuf_iterator<char>()};
    std::vector<std::byte> bytes(chars.size());
    std::transform(chars.begin(), chars.end(), bytes.begin(),
                   [](char c) { return static_cast<std::byte>(c); });
    return bytes;
}

TEST_P(fuzz_corpus, every_input_passes_its_target) {
    const fs::path dir = fs::path(UCX_ASIO_FUZZ_CORPUS) / GetParam().name;
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    std::size_t inputs = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
        if (!entry.is_regular_file())
            continue;
        SCOPED_TRACE(entry.path().string());
        const std::vector<std::byte> data = read_file(entry.path());
        GetParam().run(data);
        ++inputs;
    }
    EXPECT_GT(inputs, 0u) << "no corpus in " << dir;
}

// The empty input and a few degenerate ones, whatever the corpora hold.
TEST_P(fuzz_corpus, degenerate_inputs_pass) {
    GetParam().run({});
    for (unsigned b : {0x00u, 0x01u, 0x10u, 0x7fu, 0xffu}) {
        const std::vector<std::byte> one(1, static_cast<std::byte>(b));
        const std::vector<std::byte> many(257, static_cast<std::byte>(b));
        GetParam().run(one);
        GetParam().run(many);
    }
}

INSTANTIATE_TEST_SUITE_P(targets, fuzz_corpus, testing::ValuesIn(ucx::fuzz::targets),
                         [](const testing::TestParamInfo<ucx::fuzz::target>& info) {
                             return std::string(info.param.name);
                         });

} // namespace
