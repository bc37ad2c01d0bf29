#include "store/tcp_store_protocol.hpp"

#include <algorithm>

namespace ucx::detail::tcp_store_protocol {

namespace {

void put_u64(buffer& out, std::uint64_t v) {
    for (int i = 0; i < 8; ++i)
        out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_u64(const std::uint8_t (&b)[8]) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i)
        v = (v << 8) | b[i];
    return v;
}

void put_type(buffer& out, query_type q) {
    out.push_back(static_cast<std::byte>(q));
}

void put_string(buffer& out, std::string_view s) {
    put_u64(out, s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out.insert(out.end(), p, p + s.size());
}

void put_bytes(buffer& out, bytes_view v) {
    put_u64(out, v.size());
    out.insert(out.end(), v.begin(), v.end());
}

void put_keys(buffer& out, std::span<const std::string> keys) {
    put_u64(out, keys.size());
    for (const auto& k : keys)
        put_string(out, k);
}

} // namespace

void encode_set(buffer& out, std::string_view key, bytes_view value) {
    put_type(out, query_type::set);
    put_string(out, key);
    put_bytes(out, value);
}

void encode_compare_set(buffer& out, std::string_view key, bytes_view expected,
                        bytes_view desired) {
    put_type(out, query_type::compare_set);
    put_string(out, key);
    put_bytes(out, expected);
    put_bytes(out, desired);
}

void encode_get(buffer& out, std::string_view key) {
    put_type(out, query_type::get);
    put_string(out, key);
}

void encode_add(buffer& out, std::string_view key, std::int64_t delta) {
    put_type(out, query_type::add);
    put_string(out, key);
    put_u64(out, static_cast<std::uint64_t>(delta));
}

void encode_check(buffer& out, std::span<const std::string> keys) {
    put_type(out, query_type::check);
    put_keys(out, keys);
}

void encode_wait(buffer& out, std::span<const std::string> keys) {
    put_type(out, query_type::wait);
    put_keys(out, keys);
}

void encode_get_num_keys(buffer& out) {
    put_type(out, query_type::get_num_keys);
}

void encode_delete_key(buffer& out, std::string_view key) {
    put_type(out, query_type::delete_key);
    put_string(out, key);
}

void encode_value_reply(buffer& out, bytes_view value) {
    put_bytes(out, value);
}

void encode_int64_reply(buffer& out, std::int64_t v) {
    put_u64(out, static_cast<std::uint64_t>(v));
}

void encode_byte_reply(buffer& out, std::uint8_t b) {
    out.push_back(static_cast<std::byte>(b));
}

reply_kind reply_of(query_type q) noexcept {
    switch (q) {
    case query_type::set:
        return reply_kind::none;
    case query_type::compare_set:
    case query_type::get:
        return reply_kind::value;
    case query_type::add:
    case query_type::get_num_keys:
    case query_type::delete_key:
        return reply_kind::int64;
    case query_type::check:
        return reply_kind::check;
    case query_type::wait:
        return reply_kind::wait;
    case query_type::watch_key:
        break;
    }
    return reply_kind::none;
}

// ---- request_parser ----

void request_parser::reset() {
    status_ = parse_status::need_more;
    req_.keys.clear();
    req_.values.clear();
    req_.number = 0;
    plan_.clear();
    field_ = 0;
    phase_ = phase::type;
    num_have_ = 0;
    in_list_ = false;
    keys_left_ = 0;
    list_bytes_ = 0;
    size_ = 0;
}

std::size_t request_parser::feed(bytes_view data) {
    std::size_t used = 0;
    while (status_ == parse_status::need_more && used < data.size()) {
        switch (phase_) {
        case phase::type: {
            const auto t = static_cast<std::uint8_t>(data[used++]);
            ++size_;
            if (t > static_cast<std::uint8_t>(query_type::delete_key)) {
                fail();
                break;
            }
            req_.type = static_cast<query_type>(t);
            switch (req_.type) {
            case query_type::set:
                plan_ = {field::key, field::value};
                break;
            case query_type::compare_set:
                plan_ = {field::key, field::value, field::value};
                break;
            case query_type::get:
            case query_type::watch_key:
            case query_type::delete_key:
                plan_ = {field::key};
                break;
            case query_type::add:
                plan_ = {field::key, field::number};
                break;
            case query_type::check:
            case query_type::wait:
                plan_ = {field::keys};
                break;
            case query_type::get_num_keys:
                plan_.clear();
                break;
            }
            start_fields();
            break;
        }
        case phase::u64: {
            if (size_ > limits_.max_request_size) { // (a bound under the type's byte)
                fail();
                break;
            }
            // Up to the byte past the request's bound at most, so that the
            // request fails at the same byte however its bytes arrive.
            const std::size_t n =
                std::min({8 - num_have_, data.size() - used, limits_.max_request_size + 1 - size_});
            for (std::size_t i = 0; i < n; ++i)
                num_[num_have_++] = static_cast<std::uint8_t>(data[used + i]);
            used += n;
            size_ += n;
            if (size_ > limits_.max_request_size) {
                fail();
                break;
            }
            if (num_have_ == 8)
                on_u64(get_u64(num_));
            break;
        }
        case phase::bytes: {
            const auto n =
                static_cast<std::size_t>(std::min<std::uint64_t>(bytes_left_, data.size() - used));
            const auto* p = data.data() + used;
            if (target_is_key_) {
                req_.keys.back().append(reinterpret_cast<const char*>(p), n);
            } else {
                req_.values.back().insert(req_.values.back().end(), p, p + n);
            }
            used += n;
            size_ += n;
            bytes_left_ -= n;
            if (bytes_left_ == 0)
                on_bytes_done();
            break;
        }
        }
    }
    return used;
}

void request_parser::start_fields() {
    field_ = 0;
    if (plan_.empty()) {
        status_ = parse_status::done;
        return;
    }
    begin_u64();
}

void request_parser::next_field() {
    ++field_;
    in_list_ = false;
    if (field_ == plan_.size()) {
        status_ = parse_status::done;
        return;
    }
    begin_u64();
}

void request_parser::begin_u64() {
    phase_ = phase::u64;
    num_have_ = 0;
}

void request_parser::begin_bytes(std::uint64_t n) {
    // Every byte of the request counts; the size of a field is checked
    // before any of it is kept.
    if (n > limits_.max_request_size - size_)
        return fail();
    phase_ = phase::bytes;
    bytes_left_ = n;
    if (n == 0)
        on_bytes_done();
}

void request_parser::on_u64(std::uint64_t v) {
    switch (plan_[field_]) {
    case field::number:
        req_.number = static_cast<std::int64_t>(v);
        next_field();
        return;
    case field::key:
        if (v > limits_.max_key_size)
            return fail();
        req_.keys.emplace_back();
        target_is_key_ = true;
        return begin_bytes(v);
    case field::value:
        if (v > limits_.max_value_size)
            return fail();
        req_.values.emplace_back();
        target_is_key_ = false;
        return begin_bytes(v);
    case field::keys:
        if (!in_list_) {
            if (v > limits_.max_keys)
                return fail();
            in_list_ = true;
            keys_left_ = v;
            list_bytes_ = 0;
            if (v == 0)
                return next_field();
            return begin_u64();
        }
        if (v > limits_.max_key_size || v > limits_.max_value_size - list_bytes_)
            return fail();
        list_bytes_ += v;
        req_.keys.emplace_back();
        target_is_key_ = true;
        return begin_bytes(v);
    }
}

void request_parser::on_bytes_done() {
    if (plan_[field_] == field::keys && --keys_left_ > 0)
        return begin_u64();
    next_field();
}

// ---- answer ----

answer_result answer(store_rules::key_map& keys, request& q, buffer& out) {
    switch (q.type) {
    case query_type::set:
        keys.set(q.keys[0], std::move(q.values[0]));
        return {answer_status::replied, true};
    case query_type::compare_set: {
        auto r = keys.compare_set(q.keys[0], q.values[0], std::move(q.values[1]));
        encode_value_reply(out, r.answer);
        return {answer_status::replied, r.set};
    }
    case query_type::get: {
        const auto* v = keys.find(q.keys[0]);
        if (!v)
            return {answer_status::missing_key, false};
        encode_value_reply(out, *v);
        return {answer_status::replied, false};
    }
    case query_type::add: {
        const auto r = keys.add(q.keys[0], q.number);
        switch (r.st) {
        case store_rules::status::ok:
            encode_int64_reply(out, r.value);
            return {answer_status::replied, true};
        case store_rules::status::not_a_counter:
            return {answer_status::not_a_counter, false};
        case store_rules::status::overflow:
            break;
        }
        return {answer_status::overflow, false};
    }
    case query_type::check:
        encode_byte_reply(out, keys.check(q.keys) ? check_ready : check_not_ready);
        return {answer_status::replied, false};
    case query_type::wait:
        if (!keys.check(q.keys))
            return {answer_status::wait, false};
        encode_byte_reply(out, wait_stop_waiting);
        return {answer_status::replied, false};
    case query_type::get_num_keys:
        encode_int64_reply(out, static_cast<std::int64_t>(keys.size()));
        return {answer_status::replied, false};
    case query_type::delete_key:
        encode_int64_reply(out, keys.erase(q.keys[0]) ? 1 : 0);
        return {answer_status::replied, false};
    case query_type::watch_key:
        break;
    }
    return {answer_status::unsupported, false};
}

const char* refusal_reason(answer_status s) noexcept {
    switch (s) {
    case answer_status::replied:
    case answer_status::wait:
        break;
    case answer_status::missing_key:
        return "GET of a missing key";
    case answer_status::not_a_counter:
        return "ADD to a value that is not a counter";
    case answer_status::overflow:
        return "ADD that overflows the counter";
    case answer_status::unsupported:
        return "WATCH_KEY, which is not supported";
    }
    return nullptr;
}

// ---- reply_parser ----

void reply_parser::expect(reply_kind k) {
    kind_ = k;
    status_ = k == reply_kind::none ? parse_status::done : parse_status::need_more;
    num_have_ = 0;
    have_size_ = false;
    bytes_left_ = 0;
    value_.clear();
    number_ = 0;
    ready_ = false;
}

std::size_t reply_parser::feed(bytes_view data) {
    std::size_t used = 0;
    while (status_ == parse_status::need_more && used < data.size()) {
        switch (kind_) {
        case reply_kind::none:
            status_ = parse_status::done;
            break;
        case reply_kind::check: {
            const auto b = static_cast<std::uint8_t>(data[used++]);
            if (b != check_ready && b != check_not_ready) {
                status_ = parse_status::error;
                break;
            }
            ready_ = b == check_ready;
            status_ = parse_status::done;
            break;
        }
        case reply_kind::wait: {
            const auto b = static_cast<std::uint8_t>(data[used++]);
            status_ = b == wait_stop_waiting ? parse_status::done : parse_status::error;
            break;
        }
        case reply_kind::int64:
        case reply_kind::value:
            if (!have_size_) {
                const std::size_t n = std::min(8 - num_have_, data.size() - used);
                for (std::size_t i = 0; i < n; ++i)
                    num_[num_have_++] = static_cast<std::uint8_t>(data[used + i]);
                used += n;
                if (num_have_ < 8)
                    break;
                const std::uint64_t v = get_u64(num_);
                if (kind_ == reply_kind::int64) {
                    number_ = static_cast<std::int64_t>(v);
                    status_ = parse_status::done;
                    break;
                }
                if (v > limits_.max_value_size) {
                    status_ = parse_status::error;
                    break;
                }
                have_size_ = true;
                bytes_left_ = v;
                if (v == 0)
                    status_ = parse_status::done;
                break;
            }
            {
                const auto n = static_cast<std::size_t>(
                    std::min<std::uint64_t>(bytes_left_, data.size() - used));
                value_.insert(value_.end(), data.begin() + used, data.begin() + used + n);
                used += n;
                bytes_left_ -= n;
                if (bytes_left_ == 0)
                    status_ = parse_status::done;
            }
            break;
        }
    }
    return used;
}

} // namespace ucx::detail::tcp_store_protocol
