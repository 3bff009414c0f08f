import Strata
import StrataTesting
import Foundation
import TestBackends
import Testing

/// A price list: an indexed price (with NaNs), an unindexed stock count, an optional
/// indexed discount and an indexed shop.
struct Offer: Record, Equatable {
    var id: Int
    var shop: String
    var price: Double
    var stock: Int
    var discount: Int?

    static var indexes: [RecordIndex<Offer>] { [.index(\Offer.price), .index(\Offer.shop), .index(\Offer.discount)] }

    static func == (a: Offer, b: Offer) -> Bool {
        a.id == b.id && a.shop == b.shop && a.price.bitPattern == b.price.bitPattern && a.stock == b.stock && a.discount == b.discount
    }
}

/// `Offer`'s entity read with a field that some stored records lack: reading one of those
/// throws, so a query through this type that succeeds read none of them.
struct StrictOffer: Record {
    static var entityName: String { "Offer" }
    var id: Int
    var shop: String
    var price: Double
    var stock: Int
    var discount: Int?
    var label: String

    static var indexes: [RecordIndex<StrictOffer>] { [.index(\StrictOffer.price), .index(\StrictOffer.shop), .index(\StrictOffer.discount)] }
}

@Suite struct AggregateTests {
    static func offers(_ count: Int, seed: UInt64) -> [Offer] {
        var random = SplitMix64(seed: seed)
        let prices: [Double] = [.nan, -1, 0, 2.5, 3, 7.25, 12, 40]
        return (0..<count).map { id in
            Offer(id: id, shop: ["north", "south", "east"][Int(random.next() % 3)], price: prices[Int(random.next() % 8)],
                  stock: Int(random.next() % 50), discount: random.next() % 3 == 0 ? nil : Int(random.next() % 30))
        }
    }

    /// min, max, sum, average and counts per value equal what the records say, with and
    /// without a predicate, through an index and without one, staged and committed.
    @Test(arguments: Backend.allCases) func aggregatesEqualTheRecords(backend: Backend) async throws {
        print("AggregateTests seed 5")
        try await backend.withStore { store throws in
            let offers = Self.offers(120, seed: 5)
            try store.write { unit in for offer in offers.prefix(100) { try unit.repository(Offer.self).insert(offer) } }
            let context = store.makeContext()
            defer { context.discard() }
            let repository = context.repository(Offer.self)
            for offer in offers.dropFirst(100) { try repository.insert(offer) }   // staged, not committed
            for shop in [nil, "north", "east"] as [String?] {
                let matching = offers.filter { shop == nil || $0.shop == shop }
                let predicate: Predicate<Offer>? = shop.map { shop in #Predicate<Offer> { $0.shop == shop } }
                let prices = matching.map(\.price).filter { !$0.isNaN }
                #expect(try repository.min(\Offer.price, where: predicate) == prices.min(), "\(String(describing: shop))")
                #expect(try repository.max(\Offer.price, where: predicate) == prices.max(), "\(String(describing: shop))")
                #expect(try repository.min(\Offer.stock, where: predicate) == matching.map(\.stock).min())
                #expect(try repository.max(\Offer.stock, where: predicate) == matching.map(\.stock).max())
                #expect(try repository.min(\Offer.discount, where: predicate) == matching.compactMap(\.discount).min())
                #expect(try repository.max(\Offer.discount, where: predicate) == matching.compactMap(\.discount).max())
                #expect(try repository.sum(\Offer.stock, where: predicate) == matching.map(\.stock).reduce(0, +))
                let average = try #require(try repository.average(\Offer.stock, where: predicate))
                #expect(abs(average - Double(matching.map(\.stock).reduce(0, +)) / Double(matching.count)) < 1e-9)
                let sum = try repository.sum(\Offer.price, where: predicate)
                #expect(sum.isNaN == matching.contains { $0.price.isNaN })
                var expected: [Int?: Int] = [:]
                for offer in matching { expected[offer.discount, default: 0] += 1 }
                let counted = try repository.counts(by: \Offer.discount, where: predicate)
                #expect(counted.map(\.value) == expected.keys.sorted { ($0 ?? -1) < ($1 ?? -1) }, "nil first, then by value")
                #expect(counted.allSatisfy { expected[$0.value] == $0.count })
            }
            // Forty-odd offers a shop: each shop's entries past the first 16 counted, not walked.
            let perShop = try repository.counts(by: \Offer.shop)
            #expect(perShop.map(\.value) == ["east", "north", "south"])
            #expect(perShop.map(\.count) == ["east", "north", "south"].map { shop in offers.count { $0.shop == shop } })
            #expect(perShop.allSatisfy { $0.count > Repository<Offer>.entriesWalkedPerValue })
            #expect(try repository.min(\Offer.price, where: #Predicate { $0.shop == "nowhere" }) == nil)
            #expect(try repository.average(\Offer.stock, where: #Predicate { $0.shop == "nowhere" }) == nil)
            #expect(try repository.sum(\Offer.stock, where: #Predicate { $0.shop == "nowhere" }) == 0)
        }
    }

    /// min and max read an index end, and counts per value read index entries and one
    /// record per value: through a type that cannot read most stored records, they still
    /// answer, where a scan throws.
    @Test func extremesAndCountsReadTheIndexNotEveryRecord() throws {
        let store = try Store.inMemory()
        try store.write { unit in
            // (No NaN prices: `max` reads backwards from the top of the index, where NaNs sort,
            // and skips them after reading their records.)
            for offer in Self.offers(60, seed: 9) where !(offer.price == 40 || offer.price == -1 || offer.price.isNaN) {
                try unit.repository(Offer.self).insert(offer)
            }
            // The cheapest and dearest records are the only ones in the strict shape.
            try unit.repository(StrictOffer.self).insert(StrictOffer(id: 100, shop: "north", price: -1, stock: 1, discount: 3, label: "cheap"))
            try unit.repository(StrictOffer.self).insert(StrictOffer(id: 101, shop: "south", price: 40, stock: 1, discount: 4, label: "dear"))
        }
        let strict = store.makeContext().repository(StrictOffer.self)
        #expect(try strict.min(\StrictOffer.price) == -1)
        #expect(try strict.max(\StrictOffer.price) == 40)
        #expect(try strict.explain(sortBy: [SortDescriptor(\StrictOffer.price)]).contains("sorted by reading index price forwards"))
        #expect(throws: RecordError.self) { try strict.min(\StrictOffer.stock) }   // no index: every record is read
        #expect(throws: RecordError.self) { try strict.fetch() }
        let offers = store.makeContext().repository(Offer.self)
        #expect(try offers.counts(by: \Offer.shop).reduce(0) { $0 + $1.count } == offers.count())
    }

    /// An integer sum that does not fit is an error that names the field, not a trap.
    @Test func anOverflowingSumThrows() throws {
        let store = try Store.inMemory()
        try store.write { unit in
            for id in 0..<3 { try unit.repository(Offer.self).insert(Offer(id: id, shop: "x", price: 1, stock: .max / 2, discount: nil)) }
        }
        let offers = store.makeContext().repository(Offer.self)
        #expect(throws: RecordError.overflow(entity: "Offer", field: "stock", type: "Int")) { try offers.sum(\Offer.stock) }
    }

    /// deleteAll and updateAll change exactly the matching records, keep every index exact,
    /// and reach the typed feed as the single calls would; a failing one rolls back with
    /// its unit of work.
    @Test(arguments: Backend.allCases) func batchChangesKeepIndexesAndTheFeedExact(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let offers = Self.offers(80, seed: 6)
        try await store.write { unit in for offer in offers { try unit.repository(Offer.self).insert(offer) } }
        let feed = try store.changes(of: Offer.self, since: store.version)
        let deleted = try await store.write { unit in try unit.repository(Offer.self).deleteAll(where: #Predicate { $0.price > 10 }) }
        let raised = try await store.write { unit in
            try unit.repository(Offer.self).updateAll(where: #Predicate { $0.shop == "north" }) { offer in
                offer.stock += 1
                offer.price = offer.price.isNaN ? 99 : offer.price
            }
        }
        let unchanged = try await store.write { unit in
            try unit.repository(Offer.self).updateAll(where: #Predicate { $0.shop == "east" }) { _ in }
        }
        let survivors = offers.filter { !($0.price > 10) }
        #expect(deleted == offers.count - survivors.count)
        #expect(raised == survivors.count { $0.shop == "north" })
        #expect(unchanged == 0)
        let expected = survivors.map { offer in
            var offer = offer
            if offer.shop == "north" {
                offer.stock += 1
                if offer.price.isNaN { offer.price = 99 }
            }
            return offer
        }
        let (all, problems, byPrice) = try await store.read { context in
            let repository = context.repository(Offer.self)
            return (try repository.all(), try repository.checkIndexes(), try repository.fetch(#Predicate { $0.price == 99 }).map(\.id))
        }
        #expect(all == expected)
        #expect(problems.isEmpty, "\(problems)")
        #expect(byPrice == expected.filter { $0.price == 99 }.map(\.id))
        var kinds: [RecordChange<Offer>.Kind: Int] = [:]
        var iterator = feed.makeAsyncIterator()
        while kinds.values.reduce(0, +) < deleted + raised, let change = try await iterator.next() { kinds[change.kind, default: 0] += 1 }
        #expect(kinds == [.deleted: deleted, .updated: raised].filter { $0.value > 0 })
        // An update that changes an id is refused, and the unit rolls back as one.
        let version = store.version
        await #expect(throws: RecordError.self) {
            try await store.write { unit in try unit.repository(Offer.self).updateAll { $0.id += 1_000 } }
        }
        #expect(store.version == version)
    }
}
