// What an observed query read: every key it looked up and every range it walked, as far as
// it walked it, recorded by its read-only context (Context.C5) and merged into a
// sorted set of disjoint ranges. A commit can change the query's value only by writing a
// key inside one of them (a write outside changes nothing the query saw, including what it
// found absent), so after a commit the query runs again only when the commit's keys meet
// the set (Observation.swift, Observation.V4).
//
// Thread-safety: a recorder belongs to the context that fills it (its task); a `ReadSet`
// is an immutable value.
import StrataEngine

/// The keys and ranges one context read.
package final class ReadRecorder {
    private var ranges: [KeyRange] = []

    init() {}

    /// `key` was looked up (found or not).
    func note(_ key: [UInt8]) {
        ranges.append(KeyRange(from: key, to: key + [0]))
    }

    /// The keys from `lower` up to `upper` were walked (either bound open).
    func note(lower: [UInt8]?, upper: [UInt8]?) {
        ranges.append(KeyRange(from: lower, to: upper))
    }

    /// A walk of `range` in direction `reverse` that stopped after `last` (nil: it walked
    /// the whole range): what it read is the part of the range up to `last`, inclusive.
    func noteWalk(_ range: KeyRange, reverse: Bool, stoppedAfter last: [UInt8]?) {
        guard let last else { return note(lower: range.lower, upper: range.upper) }
        if reverse { note(lower: last, upper: range.upper) } else { note(lower: range.lower, upper: last + [0]) }
    }

    /// What was read, merged.
    var readSet: ReadSet { ReadSet(ranges) }
}

/// A sorted set of disjoint key ranges.
struct ReadSet: Sendable {
    /// Disjoint and in key order; a nil lower bound sorts first, a nil upper bound last.
    private let ranges: [KeyRange]

    init(_ ranges: [KeyRange]) {
        let sorted = ranges.filter { range in
            guard let lower = range.lower, let upper = range.upper else { return true }
            return compareKeys(lower, upper) < 0
        }.sorted { a, b in
            guard let lower = b.lower else { return false }
            return a.lower.map { compareKeys($0, lower) < 0 } ?? true
        }
        var merged: [KeyRange] = []
        for range in sorted {
            if var last = merged.last, let upper = last.upper, range.lower.map({ compareKeys($0, upper) <= 0 }) ?? true {
                last.upper = range.upper.map { compareKeys($0, upper) > 0 ? $0 : upper }
                merged[merged.count - 1] = last
            } else if let last = merged.last, last.upper == nil {
                continue
            } else {
                merged.append(range)
            }
        }
        self.ranges = merged
    }

    var isEmpty: Bool { ranges.isEmpty }

    /// Whether `key` lies in one of the ranges. O(log n).
    func contains(_ key: [UInt8]) -> Bool {
        // The last range whose lower bound is at or below the key.
        var low = 0, high = ranges.count
        while low < high {
            let middle = (low + high) / 2
            if ranges[middle].lower.map({ compareKeys($0, key) <= 0 }) ?? true { low = middle + 1 } else { high = middle }
        }
        guard low > 0 else { return false }
        return ranges[low - 1].upper.map { compareKeys(key, $0) < 0 } ?? true
    }

    /// Whether any key of `batch` lies in one of the ranges: first against the bounds of
    /// both (a query of another entity is told apart in two comparisons), then key by key.
    func meets(_ keys: [[UInt8]], lowest: [UInt8], highest: [UInt8]) -> Bool {
        guard let first = ranges.first, let last = ranges.last else { return false }
        if let upper = last.upper, compareKeys(lowest, upper) >= 0 { return false }
        if let lower = first.lower, compareKeys(highest, lower) < 0 { return false }
        return keys.contains { contains($0) }
    }
}
