// Internal: an error category described by tables, one row a code: its
// message, and the portable condition it maps to where one fits.
#pragma once

#include <boost/system/errc.hpp>
#include <boost/system/error_category.hpp>
#include <boost/system/error_condition.hpp>

#include <algorithm>
#include <optional>
#include <span>
#include <string>

namespace ucx::detail {

/// The portable conditions a code may map to.
using std_errc = boost::system::errc::errc_t;

/// A code of the error enum `E`: its message (none where the category has
/// its own), and the portable condition it maps to where one fits.
template <class E>
struct error_row {
    E code;
    const char* message = nullptr;
    std::optional<std_errc> condition{};
};

/// The category of the error enum `E`: `message()` and
/// `default_error_condition()` look the code up in its rows. A code without
/// a message gets `unknown`; one without a condition maps to itself.
template <class E>
class table_category : public boost::system::error_category {
public:
    table_category(const char* name, std::span<const error_row<E>> rows,
                   const char* unknown) noexcept
        : name_(name), rows_(rows), unknown_(unknown) {}

    const char* name() const noexcept override { return name_; }

    std::string message(int ev) const override {
        const error_row<E>* r = find(ev);
        return r && r->message ? r->message : unknown_;
    }

    boost::system::error_condition default_error_condition(int ev) const noexcept override {
        const error_row<E>* r = find(ev);
        return r && r->condition ? make_error_condition(*r->condition)
                                 : boost::system::error_condition(ev, *this);
    }

private:
    const error_row<E>* find(int ev) const noexcept {
        const auto it = std::ranges::find_if(
            rows_, [ev](const error_row<E>& r) { return static_cast<int>(r.code) == ev; });
        return it == rows_.end() ? nullptr : &*it;
    }

    const char* name_;
    std::span<const error_row<E>> rows_;
    const char* unknown_;
};

} // namespace ucx::detail
