// The element types and operations of reductions (ucx::group's allreduce and
// reduce; an NCCL communicator's collectives): plain types, with no I/O.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace ucx {

/// The element types of reductions.
enum class datatype : std::uint8_t {
    int8,
    uint8,
    int16,
    uint16,
    int32,
    uint32,
    int64,
    uint64,
    float32,
    float64
};

/// The `datatype` of `T` (the integer types of 1 to 8 bytes, `float`,
/// `double`).
template <class T>
inline constexpr datatype datatype_of = [] {
    static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool> &&
                      (std::is_integral_v<T> || sizeof(T) == 4 || sizeof(T) == 8),
                  "ucx::group reductions take integers, float and double");
    if constexpr (std::is_floating_point_v<T>)
        return sizeof(T) == 4 ? datatype::float32 : datatype::float64;
    else if constexpr (sizeof(T) == 1)
        return std::is_signed_v<T> ? datatype::int8 : datatype::uint8;
    else if constexpr (sizeof(T) == 2)
        return std::is_signed_v<T> ? datatype::int16 : datatype::uint16;
    else if constexpr (sizeof(T) == 4)
        return std::is_signed_v<T> ? datatype::int32 : datatype::uint32;
    else
        return std::is_signed_v<T> ? datatype::int64 : datatype::uint64;
}();

/// The operations of reductions. Integers wrap as their C++ type does
/// (unsigned) or as two's complement (signed).
enum class reduce_op : std::uint8_t { sum, prod, min, max };

/// The name of `t` ("int8", ..., "float32", "float64"; "unknown" for a value
/// out of range).
std::string_view to_string(datatype t) noexcept;
/// The name of `op` ("sum", "prod", "min", "max"; "unknown" for a value out
/// of range).
std::string_view to_string(reduce_op op) noexcept;

} // namespace ucx
