// The values an index can hold, and Strata's order of them: each value's index bytes
// (FORMAT.md, "Keys") sort as the values do, end on their own so that an id can follow, and
// are equal exactly for values that are `==`. For the scalars Strata defines (integers,
// `String`, `Double`, `Float`, `Date`, `UUID`, `Bool`, `Data` and optionals of them) that
// byte order is also the order Strata sorts in, in memory or by reading an index, so a sort
// gives the same records in the same order whether or not an index serves it:
//  - integers by value, whatever their width;
//  - `String` by the UTF-8 bytes of its canonical composition (NFC): `<`'s order for
//    strings in NFC, and the same bytes for strings that are `==`;
//  - `Double`, `Float` and `Date` by value, `-0.0` equal to `0.0`, every NaN equal to every
//    other and after `+infinity` (where `<` leaves a NaN unordered);
//  - `UUID` by its 16 bytes (`<`'s order), `Bool` false first, `Data` by its bytes;
//  - an optional nil first, then its values in their order.
import StrataContexts
import Foundation

/// A value an index can order: its bytes sort as the values do.
public protocol IndexableValue: Sendable {
    /// Order-preserving bytes, self-delimiting so that an id can follow them.
    var indexBytes: [UInt8] { get }
}

extension String: IndexableValue {
    /// The UTF-8 of its canonical composition (NFC) with each zero byte escaped as
    /// `00 FF`, ended by `00 00`. Strings equal under `==` (canonically equivalent) get
    /// the same bytes, and the bytes sort as `<` orders strings in NFC.
    public var indexBytes: [UInt8] {
        // ASCII without zero bytes (most keys) is its own composition and needs no escape.
        // (Made inside `withContiguousStorageIfAvailable`, the array was allocated through
        // the unspecialized buffer initializer: about 700 instructions of runtime metadata
        // lookups a key, callgrind.)
        if !utf8.contains(where: { $0 == 0 || $0 >= 0x80 }) {
            var plain: [UInt8] = []
            plain.reserveCapacity(utf8.count + 2)
            plain.append(contentsOf: utf8)
            plain.append(0)
            plain.append(0)
            return plain
        }
        let composed = utf8.allSatisfy { $0 < 0x80 } ? self : precomposedStringWithCanonicalMapping
        return escapedIndexBytes(composed.utf8)
    }
}

extension Data: IndexableValue {
    /// Its bytes with each zero byte escaped as `00 FF`, ended by `00 00`.
    public var indexBytes: [UInt8] { escapedIndexBytes(self) }
}

/// `bytes` with each zero byte written `00 FF`, then `00 00`: self-delimiting, and in the
/// order of the bytes (a shorter run sorts before any longer one it starts).
func escapedIndexBytes(_ bytes: some Collection<UInt8>) -> [UInt8] {
    var escaped: [UInt8] = []
    escaped.reserveCapacity(bytes.count + 2)
    for byte in bytes {
        escaped.append(byte)
        if byte == 0 { escaped.append(0xFF) }
    }
    escaped.append(0)
    escaped.append(0)
    return escaped
}

extension Int: IndexableValue {
    public var indexBytes: [UInt8] { keyBytes }
}

extension Int64: IndexableValue {
    public var indexBytes: [UInt8] { keyBytes }
}

extension UInt64: IndexableValue {
    public var indexBytes: [UInt8] { keyBytes }
}

// Narrower and unsigned integers index as their 64-bit counterparts (8 bytes), so an
// index keeps its bytes if a field's integer type is widened.
extension Int8: IndexableValue { public var indexBytes: [UInt8] { Int64(self).keyBytes } }
extension Int16: IndexableValue { public var indexBytes: [UInt8] { Int64(self).keyBytes } }
extension Int32: IndexableValue { public var indexBytes: [UInt8] { Int64(self).keyBytes } }
extension UInt8: IndexableValue { public var indexBytes: [UInt8] { UInt64(self).keyBytes } }
extension UInt16: IndexableValue { public var indexBytes: [UInt8] { UInt64(self).keyBytes } }
extension UInt32: IndexableValue { public var indexBytes: [UInt8] { UInt64(self).keyBytes } }
extension UInt: IndexableValue { public var indexBytes: [UInt8] { UInt64(self).keyBytes } }

extension Double: IndexableValue {
    /// IEEE 754 bits, sign bit flipped for positives and every bit flipped for negatives;
    /// -0.0 is written as 0.0, which it equals, and every NaN as the one positive quiet
    /// NaN, after `+infinity`.
    public var indexBytes: [UInt8] {
        let bits = isNaN ? Double.nan.bitPattern : self == 0 ? 0 : bitPattern
        return UInt64(bits & (1 << 63) == 0 ? bits | (1 << 63) : ~bits).keyBytes
    }
}

extension Float: IndexableValue {
    /// As the `Double` it converts to exactly, so a field widened to `Double` keeps its bytes.
    public var indexBytes: [UInt8] { Double(self).indexBytes }
}

extension Date: IndexableValue {
    /// Its `timeIntervalSinceReferenceDate` as a `Double` index value.
    public var indexBytes: [UInt8] { timeIntervalSinceReferenceDate.indexBytes }
}

extension IndexableValue where Self: RawRepresentable, RawValue: IndexableValue {
    /// An enum with raw values indexes as its raw value: declare
    /// `extension Status: IndexableValue {}` to index a `Status` field.
    public var indexBytes: [UInt8] { rawValue.indexBytes }
}

extension Bool: IndexableValue {
    public var indexBytes: [UInt8] { [self ? 1 : 0] }
}

extension UUID: IndexableValue {
    public var indexBytes: [UInt8] { keyBytes }
}

extension Optional: IndexableValue where Wrapped: IndexableValue {
    /// nil sorts first.
    public var indexBytes: [UInt8] { map { [1] + $0.indexBytes } ?? [0] }
}

// MARK: What the planner may rely on

/// Values whose `==` holds exactly when their index bytes are equal, so the entries under
/// a value's bytes are exactly the records `==` holds for. (A floating-point NaN is equal
/// to nothing: the planner never reads a NaN constant from an index, `constantBytes`.)
protocol ExactIndexEquality: IndexableValue {}
extension Int: ExactIndexEquality {}
extension Int64: ExactIndexEquality {}
extension UInt64: ExactIndexEquality {}
extension Int8: ExactIndexEquality {}
extension Int16: ExactIndexEquality {}
extension Int32: ExactIndexEquality {}
extension UInt8: ExactIndexEquality {}
extension UInt16: ExactIndexEquality {}
extension UInt32: ExactIndexEquality {}
extension UInt: ExactIndexEquality {}
extension Bool: ExactIndexEquality {}
extension String: ExactIndexEquality {}
extension Double: ExactIndexEquality {}
extension Float: ExactIndexEquality {}
extension Date: ExactIndexEquality {}
extension UUID: ExactIndexEquality {}
extension Data: ExactIndexEquality {}
extension Optional: ExactIndexEquality where Wrapped: ExactIndexEquality {}

/// Values whose `<` agrees with their index bytes, so a range term reads exactly its
/// records (for floating-point values, `NaNRanges` says where a range read ends). For
/// `String` only against a constant in ASCII (`RecordIndex.rangeBytes`): the standard
/// library's `<` between two strings not in NFC does not always agree with canonical
/// order (`"e\u{301}" < "\u{E9}x"` is false though `"e\u{301}" == "\u{E9}"`), so a range
/// against any other constant is not read from an index; it is evaluated.
protocol ExactIndexRanges: ExactIndexEquality {}
extension String: ExactIndexRanges {}
extension Int: ExactIndexRanges {}
extension Int64: ExactIndexRanges {}
extension UInt64: ExactIndexRanges {}
extension Int8: ExactIndexRanges {}
extension Int16: ExactIndexRanges {}
extension Int32: ExactIndexRanges {}
extension UInt8: ExactIndexRanges {}
extension UInt16: ExactIndexRanges {}
extension UInt32: ExactIndexRanges {}
extension UInt: ExactIndexRanges {}
extension Double: ExactIndexRanges {}
extension Float: ExactIndexRanges {}
extension Date: ExactIndexRanges {}
extension UUID: ExactIndexRanges {}

/// Values that can be NaN, which sort last in an index: a range read must say whether it
/// takes them (`NaNRanges`).
protocol FloatingIndexValue: IndexableValue {}
extension Double: FloatingIndexValue {}
extension Float: FloatingIndexValue {}
extension Date: FloatingIndexValue {}

/// The index bytes every NaN of a floating-point value takes.
let nanIndexBytes = Double.nan.indexBytes

/// How a value type's comparisons treat NaN, and so where its range reads end.
enum NaNRanges: Sendable {
    /// No NaN: every range reads as the comparison says.
    case none
    /// IEEE 754 (`Double`, `Float`): no comparison holds for a NaN, so a range read
    /// upwards (`>`, `>=`) ends before the NaNs.
    case ieee
    /// `Comparable`'s default operators over an IEEE `<` (`Date`): `a > b` is `b < a`, but
    /// `a >= b` is `!(a < b)` and `a <= b` is `!(b < a)`, which hold for a NaN. So `>` ends
    /// before the NaNs, `>=` reads through them, and `<=` (a range below the value and the
    /// NaNs above everything) is not read from the index: it is evaluated.
    case comparableDefaults
}

/// Values Strata sorts in the order of their index bytes (the list at the top of this
/// file), in memory and through an index alike (RecordOrder.swift).
protocol StrataOrdered: IndexableValue {}
extension Int: StrataOrdered {}
extension Int64: StrataOrdered {}
extension UInt64: StrataOrdered {}
extension Int8: StrataOrdered {}
extension Int16: StrataOrdered {}
extension Int32: StrataOrdered {}
extension UInt8: StrataOrdered {}
extension UInt16: StrataOrdered {}
extension UInt32: StrataOrdered {}
extension UInt: StrataOrdered {}
extension Bool: StrataOrdered {}
extension String: StrataOrdered {}
extension Double: StrataOrdered {}
extension Float: StrataOrdered {}
extension Date: StrataOrdered {}
extension UUID: StrataOrdered {}
extension Data: StrataOrdered {}
extension Optional: StrataOrdered where Wrapped: StrataOrdered {}

/// The bytes `escapedIndexBytes` wrote at the start of `bytes`, and where they end (after
/// the closing `00 00`); nil when `bytes` does not start with such a run.
func unescapedIndexBytes(_ bytes: ArraySlice<UInt8>) -> (bytes: [UInt8], end: Int)? {
    var plain: [UInt8] = []
    var index = bytes.startIndex
    while index < bytes.endIndex {
        let byte = bytes[index]
        guard byte == 0 else {
            plain.append(byte)
            index += 1
            continue
        }
        guard index + 1 < bytes.endIndex else { return nil }
        switch bytes[index + 1] {
        case 0: return (plain, index + 2)
        case 0xFF: plain.append(0)
        default: return nil
        }
        index += 2
    }
    return nil
}
