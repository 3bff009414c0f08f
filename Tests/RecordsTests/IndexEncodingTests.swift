import Strata
import StrataTesting
import Foundation
import Testing

/// Index bytes (FORMAT.md, "Keys"): they order as the values do, equal values share them,
/// and none is a proper prefix of another (so an id can follow).
@Suite struct IndexEncodingTests {
    /// Checks order, equality and self-delimitation of `values`' index bytes against `<`.
    static func checkOrder<V: IndexableValue & Comparable>(_ values: [V], _ name: String) {
        checkOrder(values, name, less: <, equal: ==)
    }

    /// Optionals: nil first, then the wrapped values in their order.
    static func checkOrder<V: IndexableValue & Comparable>(_ values: [V?], _ name: String) {
        checkOrder(values, name, less: { a, b in b.map { b in a.map { $0 < b } ?? true } ?? false }, equal: ==)
    }

    static func checkOrder<V: IndexableValue>(_ values: [V], _ name: String, less: (V, V) -> Bool, equal: (V, V) -> Bool) {
        for a in values {
            for b in values {
                let bytes = (a.indexBytes, b.indexBytes)
                let byteOrder = bytes.0.lexicographicallyPrecedes(bytes.1) ? -1 : bytes.0 == bytes.1 ? 0 : 1
                let valueOrder = less(a, b) ? -1 : equal(a, b) ? 0 : 1
                #expect(byteOrder == valueOrder, "\(name): \(String(reflecting: a)) vs \(String(reflecting: b)): bytes \(bytes.0) \(bytes.1)")
                if bytes.0 != bytes.1 {
                    #expect(!bytes.1.starts(with: bytes.0), "\(name): \(a)'s bytes are a prefix of \(b)'s")
                }
            }
        }
    }

    @Test(arguments: [UInt64(7), 8])
    func everyScalarOrdersAsItsValues(seed: UInt64) {
        print("IndexEncodingTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        func values<I: FixedWidthInteger>(_ type: I.Type) -> [I] {
            [I.min, I.max, 0, 1] + (0..<40).map { _ in I(truncatingIfNeeded: random.next()) }
        }
        Self.checkOrder(values(Int8.self), "Int8")
        Self.checkOrder(values(Int16.self), "Int16")
        Self.checkOrder(values(Int32.self), "Int32")
        Self.checkOrder(values(Int64.self), "Int64")
        Self.checkOrder(values(Int.self), "Int")
        Self.checkOrder(values(UInt8.self), "UInt8")
        Self.checkOrder(values(UInt16.self), "UInt16")
        Self.checkOrder(values(UInt32.self), "UInt32")
        Self.checkOrder(values(UInt64.self), "UInt64")
        Self.checkOrder(values(UInt.self), "UInt")
        let doubles: [Double] = [-.infinity, -1e300, -1, -0.0, 0, .leastNonzeroMagnitude, 1, 1e300, .infinity]
            + (0..<40).map { _ in Double(bitPattern: random.next()) }.filter { !$0.isNaN }
        Self.checkOrder(doubles, "Double")
        Self.checkOrder(doubles.filter(\.isFinite).map { Date(timeIntervalSinceReferenceDate: $0) }, "Date")
        let scalars = ["", "a", "ab", "a\u{0}", "a\u{0}b", "\u{0}", "\u{E9}", "e\u{301}", "\u{1E9B}\u{323}", "😀", "z"]
        let strings = scalars + (0..<30).map { _ in
            String((0..<Int(random.next() % 4)).map { _ in scalars.randomElement(using: &random)!.first ?? "x" })
        }
        // Strings order as their canonical compositions (NFC) do, and canonically equivalent
        // strings share their bytes. (The standard library's `<` on strings not in NFC does
        // not always agree with canonical order: "e\u{301}" < "\u{E9}x" is false.)
        Self.checkOrder(strings, "String", less: { $0.precomposedStringWithCanonicalMapping < $1.precomposedStringWithCanonicalMapping },
                        equal: ==)
        // Floating-point values in Strata's order: -0 equal to 0, every NaN equal and last.
        let nans: [Double] = [.nan, -.nan, Double(bitPattern: 0x7FF0_0000_0000_0001), Double(bitPattern: 0xFFF8_0000_0000_0042)]
        let strataLess: (Double, Double) -> Bool = { a, b in a.isNaN ? false : b.isNaN ? true : a < b }
        let strataEqual: (Double, Double) -> Bool = { a, b in a.isNaN ? b.isNaN : a == b }
        Self.checkOrder(doubles + nans, "Double with NaNs", less: strataLess, equal: strataEqual)
        Self.checkOrder((doubles + nans).map(Float.init), "Float", less: { strataLess(Double($0), Double($1)) },
                        equal: { strataEqual(Double($0), Double($1)) })
        Self.checkOrder((doubles + nans).map { Date(timeIntervalSinceReferenceDate: $0) }, "Date with NaNs",
                        less: { strataLess($0.timeIntervalSinceReferenceDate, $1.timeIntervalSinceReferenceDate) },
                        equal: { strataEqual($0.timeIntervalSinceReferenceDate, $1.timeIntervalSinceReferenceDate) })
        let blobs = [Data(), Data([0]), Data([0, 0]), Data([0, 1]), Data([0, 0xFF]), Data([1]), Data([0xFF]), Data([0xFF, 0])]
            + (0..<30).map { _ in Data((0..<Int(random.next() % 4)).map { _ in [0, 1, 0xFF][Int(random.next() % 3)] }) }
        Self.checkOrder(blobs, "Data", less: { $0.lexicographicallyPrecedes($1) }, equal: ==)
        Self.checkOrder([false, true], "Bool", less: { !$0 && $1 }, equal: ==)
        Self.checkOrder((0..<20).map { _ in UUID() }, "UUID")
        Self.checkOrder(values(Int.self).map { Optional($0) } + [nil], "Int?")
        Self.checkOrder(strings.map { Optional($0.precomposedStringWithCanonicalMapping) } + [Optional<String>.none], "String?")
    }

    enum Status: String, Codable, IndexableValue { case open, closed }

    struct Task: Record {
        var id: Int
        var status: Status
        var due: Date
        var priority: Int8
        static var indexes: [RecordIndex<Task>] {
            [.index(\Task.status, \Task.priority), .index(\Task.status), .index(\Task.due), .index(\Task.priority)]
        }
    }

    /// Enums with raw values, dates and narrow integers are indexed and planned, and their
    /// fetches equal a scan's.
    @Test func enumsDatesAndNarrowIntegersAreIndexed() throws {
        let store = try Store.inMemory()
        let start = Date(timeIntervalSinceReferenceDate: 800_000_000)
        try store.write { unit in
            for id in 0..<60 {
                try unit.repository(Task.self).insert(Task(id: id, status: id % 3 == 0 ? .closed : .open,
                                                           due: start.addingTimeInterval(Double(id % 7) * 3_600), priority: Int8(id % 5) - 2))
            }
        }
        let tasks = store.makeContext().repository(Task.self)
        let all = try tasks.all()
        let open = Status.open
        let soon = start.addingTimeInterval(7_200)
        let low: Int8 = 0
        #expect(try tasks.explain(#Predicate { $0.status == open }).contains("index status"))
        #expect(try tasks.fetch(#Predicate { $0.status == open }).map(\.id) == all.filter { $0.status == .open }.map(\.id))
        #expect(try tasks.explain(#Predicate { $0.due < soon }).contains("index due"))
        #expect(try tasks.fetch(#Predicate { $0.due < soon }).map(\.id) == all.filter { $0.due < soon }.map(\.id))
        #expect(try tasks.explain(#Predicate { $0.priority < low }).contains("the read is exact"))
        #expect(try tasks.count(#Predicate { $0.priority < low }) == all.count { $0.priority < 0 })
        let byPriority = try tasks.fetch(sortBy: [SortDescriptor(\Task.priority, order: .reverse)], limit: 10)
        #expect(try tasks.explain(sortBy: [SortDescriptor(\Task.priority, order: .reverse)]).contains("sorted by reading index priority"))
        #expect(byPriority.map(\.id) == Array(all.sorted(using: [SortDescriptor(\Task.priority, order: .reverse)]).prefix(10)).map(\.id))
        // The compound index: an equality on the status, then the priority in order.
        let urgentOpen = #Predicate<Task> { $0.status == open }
        let sort = [SortDescriptor(\Task.priority, order: .reverse)]
        let plan = try tasks.explain(urgentOpen, sortBy: sort)
        #expect(plan.hasPrefix("read: index status+priority where status == open;") && plan.contains("sorted by reading index status+priority backwards"),
                "\(plan)")
        let expected = all.filter { $0.status == .open }.sorted(using: sort)
        #expect(try tasks.fetch(urgentOpen, sortBy: sort, limit: 7).map(\.id) == Array(expected.prefix(7)).map(\.id))
        // Keyset pages through the compound index, from a record of the page before and
        // from one the predicate does not hold for (the read cannot start at its entry).
        let forward = [SortDescriptor(\Task.priority)]
        for status in [Status.open, .closed] {
            let ordered = all.filter { $0.status == status }.sorted(using: forward)
            let other = all.first { $0.status != status && $0.priority == 0 }!
            for anchor in [ordered[5], other] {
                let after = ordered.filter { $0.priority > anchor.priority || ($0.priority == anchor.priority && $0.id > anchor.id) }
                let page = try tasks.fetch(#Predicate<Task> { $0.status == status }, sortBy: forward, after: anchor, limit: 100)
                #expect(page.map(\.id) == after.map(\.id), "\(status) after \(anchor.id)")
            }
        }
        let band = #Predicate<Task> { $0.status == open && $0.priority >= low }
        #expect(try tasks.explain(band).hasPrefix("read: index status+priority where status == open and priority >= 0;"))
        #expect(try tasks.fetch(band).map(\.id) == all.filter { $0.status == .open && $0.priority >= 0 }.map(\.id))
    }

    /// FORMAT.md's string bytes, for the ASCII fast path and the general one alike: UTF-8 of
    /// the NFC composition, each zero byte followed by FF, then 00 00.
    @Test func stringBytesAreTheDocumentedOnes() {
        #expect("person1@example.org".indexBytes == Array("person1@example.org".utf8) + [0, 0])
        #expect("".indexBytes == [0, 0])
        #expect("a\u{0}b".indexBytes == [0x61, 0, 0xFF, 0x62, 0, 0])
        #expect("e\u{301}".indexBytes == [0xC3, 0xA9, 0, 0])
        #expect("\u{E9}\u{0}".indexBytes == [0xC3, 0xA9, 0, 0xFF, 0, 0])
        let bridged = NSString(string: "city42") as String   // maybe not contiguous UTF-8
        #expect(bridged.indexBytes == Array("city42".utf8) + [0, 0])
    }
}
