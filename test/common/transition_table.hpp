#pragma once
// The table test of a state machine: every input in every state. A setup
// brings a fresh machine to a state, an input drives it and tells what it
// did as text; each row of the table names a setup and an input, the text
// expected and the state after (as `describe` words it). The table must
// cover every setup with every input, once.

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ucx::test {

struct transition {
    const char* from;
    const char* input;
    const char* actions;
    const char* to;
};

template <class Machine>
struct fsm_setup {
    const char* name;
    std::function<void(Machine&)> run;
};

template <class Machine>
struct fsm_input {
    const char* name;
    std::function<std::string(Machine&)> run;
};

/// Checks every row of `table`: `make()` gives a fresh machine.
template <class Machine, class Make, class Describe>
void check_transitions(const std::vector<fsm_setup<Machine>>& setups,
                       const std::vector<fsm_input<Machine>>& inputs,
                       std::span<const transition> table, Make make, Describe describe) {
    std::set<std::pair<std::string, std::string>> seen;
    for (const transition& t : table) {
        const fsm_setup<Machine>* s = nullptr;
        for (const auto& c : setups)
            if (std::string(c.name) == t.from)
                s = &c;
        const fsm_input<Machine>* in = nullptr;
        for (const auto& c : inputs)
            if (std::string(c.name) == t.input)
                in = &c;
        ASSERT_TRUE(s && in) << t.from << " " << t.input;
        EXPECT_TRUE(seen.emplace(t.from, t.input).second)
            << "twice: " << t.from << " + " << t.input;
        Machine f = make();
        s->run(f);
        EXPECT_EQ(in->run(f), t.actions) << t.from << " + " << t.input;
        EXPECT_EQ(describe(f), t.to) << t.from << " + " << t.input;
    }
    // The table covers the full product.
    EXPECT_EQ(seen.size(), setups.size() * inputs.size());
}

} // namespace ucx::test
