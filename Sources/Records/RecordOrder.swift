// Sorting records as a fetch does: a `SortDescriptor` on a key path whose values Strata
// orders (IndexableValue.swift: integers, strings, floating-point numbers, dates, UUIDs,
// Booleans, `Data` and optionals of them), compared in the default or `.lexical` way,
// orders by the values' index bytes, in memory exactly as an index reads them; any other
// descriptor (a localized string comparison, an enum) compares as Foundation does. So a
// query returns the same records in the same order whether an index serves its sort or
// not, and NaNs, which `<` leaves unordered, sort last instead of anywhere. Sorts are
// stable: ties keep the order they came in (id order, for a fetch).
import StrataContexts
import Foundation

/// `.lexical` in each direction, made once.
private let lexicalForward = String.StandardComparator.lexical
private let lexicalReverse: String.StandardComparator = {
    var lexical = String.StandardComparator.lexical
    lexical.order = .reverse
    return lexical
}()

/// The order of a fetch's `sortBy`, as Strata sorts.
@usableFromInline
struct RecordOrder<R: Record> {
    /// How one descriptor compares: by index bytes, or as Foundation does.
    private enum Key {
        case bytes((R) -> [UInt8], reverse: Bool)
        case foundation(SortDescriptor<R>)
    }

    private let keys: [Key]

    @usableFromInline
    init(_ sortBy: [SortDescriptor<R>]) {
        keys = sortBy.map { descriptor in
            guard Self.comparesAsStrata(descriptor.stringComparator), let keyPath = descriptor.keyPath,
                  let bytes = Self.bytes(keyPath) else { return .foundation(descriptor) }
            return .bytes(bytes, reverse: descriptor.order == .reverse)
        }
    }

    /// What the key paths of `sortBy` are to the record type, and their directions, when
    /// every descriptor sorts as Strata does, so that a read in index or key order may
    /// serve it (`QueryPlan.pushDown`); nil when one compares as Foundation does.
    @usableFromInline
    static func readable(_ sortBy: [SortDescriptor<R>], shape: RecordShape) -> [PlanSort]? {
        var sorts: [PlanSort] = []
        sorts.reserveCapacity(sortBy.count)
        for descriptor in sortBy {
            // The descriptor read here only: each function that reads one looks the
            // metadata of `SortDescriptor<R>` up again (~330 instructions).
            guard comparesAsStrata(descriptor.stringComparator), let keyPath = descriptor.keyPath else { return nil }
            let facts = shape.facts(keyPath)
            guard facts.sortsAsStrata else { return nil }
            sorts.append(PlanSort(facts: facts, reverse: descriptor.order == .reverse))
        }
        return sorts
    }

    /// Whether a descriptor with `comparator` (its `stringComparator`) compares in its
    /// values' own order: a string comparison that is neither localized nor case-folding
    /// (`.lexical`), or `Comparable`'s (nil).
    private static func comparesAsStrata(_ comparator: String.StandardComparator?) -> Bool {
        guard let comparator else { return true }
        return comparator == (comparator.order == .forward ? lexicalForward : lexicalReverse)
    }

    /// The index bytes of the value at `keyPath`, when its type is one Strata orders.
    private static func bytes(_ keyPath: AnyKeyPath) -> ((R) -> [UInt8])? {
        guard let type = type(of: keyPath).valueType as? any StrataOrdered.Type else { return nil }
        func reader<V: StrataOrdered>(_: V.Type) -> ((R) -> [UInt8])? {
            guard let typed = keyPath as? KeyPath<R, V> else { return nil }
            return { $0[keyPath: typed].indexBytes }
        }
        return reader(type)
    }

    /// How `a` compares with `b` in this order (`.orderedSame` for ties).
    func compare(_ a: R, _ b: R) -> ComparisonResult {
        for key in keys {
            let result: ComparisonResult
            switch key {
            case let .bytes(bytes, reverse):
                result = Self.compare(bytes(a), bytes(b), reverse: reverse)
            case let .foundation(descriptor):
                result = descriptor.compare(a, b)
            }
            if result != .orderedSame { return result }
        }
        return .orderedSame
    }

    private static func compare(_ a: [UInt8], _ b: [UInt8], reverse: Bool) -> ComparisonResult {
        guard a != b else { return .orderedSame }
        return a.lexicographicallyPrecedes(b) != reverse ? .orderedAscending : .orderedDescending
    }

    /// Sorts `records` in this order, stably. Each record's index bytes are read once.
    @usableFromInline
    func sort(_ records: inout [R]) {
        guard records.count > 1, !keys.isEmpty else { return }
        let byteKeys: [[[UInt8]]] = records.map { record in
            keys.map { key in if case let .bytes(bytes, _) = key { bytes(record) } else { [] } }
        }
        let order = records.indices.sorted { left, right in
            for (position, key) in keys.enumerated() {
                let result: ComparisonResult
                switch key {
                case let .bytes(_, reverse):
                    result = Self.compare(byteKeys[left][position], byteKeys[right][position], reverse: reverse)
                case let .foundation(descriptor):
                    result = descriptor.compare(records[left], records[right])
                }
                if result != .orderedSame { return result == .orderedAscending }
            }
            return left < right
        }
        let unordered = records
        for (position, index) in order.enumerated() { records[position] = unordered[index] }
    }

    /// Whether `record` comes after `anchor` in this order, ties in id order (keyset
    /// pagination).
    @usableFromInline
    func follows(_ record: R, _ anchor: R) -> Bool {
        switch compare(record, anchor) {
        case .orderedAscending: return false
        case .orderedDescending: return true
        case .orderedSame:
            let (mine, theirs) = (record.id.keyBytes, anchor.id.keyBytes)
            return mine != theirs && !mine.lexicographicallyPrecedes(theirs)
        }
    }
}
