// Fuzz target: flight records read back from JSON (ucx::from_json), as
// ucx-asio-flight reads files it is given, and their diagnosis. Checked:
// - a document that parses writes back (to_json) to one that parses to the
//   same record (every field, every event);
// - the diagnosis of the record, of it beside a copy that claims another
//   rank, and of a copy with its events cut in half, names only ranks of
//   the group, each once, and every missing rank is one no record was given
//   for.
//
// Input: the document's bytes.
#include "fuzz.hpp"

#include <ucx/flight_recorder.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace ucx::fuzz {

namespace {

void check(bool ok, const char* what) {
    if (!ok)
        violated(what, __FILE__, __LINE__);
}

bool same(const flight_event& a, const flight_event& b) {
    return a.id == b.id && a.kind == b.kind && a.state == b.state &&
           (a.kind == flight_event_kind::send || a.kind == flight_event_kind::recv ||
            (a.collective == b.collective && a.seq == b.seq && a.root == b.root)) &&
           a.has_reduction == b.has_reduction &&
           (!a.has_reduction || (a.type == b.type && a.op == b.op)) && a.in_bytes == b.in_bytes &&
           a.out_bytes == b.out_bytes && a.start_us == b.start_us && a.end_us == b.end_us &&
           a.round == b.round && a.rounds == b.rounds && a.waiting_for == b.waiting_for &&
           a.error == b.error;
}

void check_diagnosis(const std::vector<ucx::flight_record>& records) {
    const flight_diagnosis d = diagnose(records);
    const int size = records.empty() ? 0 : records.front().size;
    for (const std::vector<int>* list : {&d.culprits, &d.missing}) {
        check(std::is_sorted(list->begin(), list->end()), "ranks in order");
        check(std::adjacent_find(list->begin(), list->end()) == list->end(), "each rank once");
        for (const int r : *list)
            check(r >= 0 && r < size, "a rank of the group");
    }
    for (const int m : d.missing)
        check(std::none_of(records.begin(), records.end(),
                           [&](const ucx::flight_record& r) {
                               return r.rank == m && r.group == records.front().group &&
                                      r.size == size;
                           }),
              "a missing rank sent no record");
}

} // namespace

void flight_record(input data) {
    const std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
    ucx::flight_record r;
    if (from_json(text, r))
        return;
    ucx::flight_record back;
    check(!from_json(to_json(r), back), "a record written back parses");
    check(back.group == r.group && back.rank == r.rank && back.size == r.size &&
              back.host == r.host && back.pid == r.pid && back.time_us == r.time_us &&
              back.reason == r.reason && back.error == r.error &&
              back.collectives == r.collectives && back.dropped == r.dropped &&
              back.events.size() == r.events.size(),
          "the same record");
    for (std::size_t i = 0; i < r.events.size(); ++i)
        check(same(r.events[i], back.events[i]), "the same event");
    check_diagnosis({r});
    ucx::flight_record other = r;
    other.rank = (r.rank + 1) % r.size;
    other.events.resize(other.events.size() / 2);
    check_diagnosis({r, other});
    check_diagnosis({other});
}

} // namespace ucx::fuzz

UCX_ASIO_FUZZ_ENTRY(flight_record)
