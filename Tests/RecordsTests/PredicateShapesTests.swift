@testable import Strata
import Foundation
import Testing

/// PredicateShapes.swift: the terms read by closures compiled once per expression type
/// are the terms of each predicate, with its own constants, and a conjunct that is not a
/// comparison of the input's key path with a constant counts without becoming a term.
@Suite struct PredicateShapesTests {
    struct Item: Codable {
        var id: Int
        var count: Int
        var name: String
        var flag: Bool
        var other: Int
    }

    /// One place in the source, so one expression type, whatever the constant.
    static func countAbove(_ bound: Int) -> Predicate<Item> { #Predicate<Item> { $0.count > bound } }

    static func rendered(_ terms: PredicateTerms) -> [String] {
        terms.terms.map { "\($0.keyPath) \($0.op.symbol) \($0.constant)" }
    }

    @Test func everyPredicateOfOneTypeGetsItsOwnConstants() {
        for bound in [3, -7, 12, 3] {
            let terms = PredicateShapes.terms(of: Self.countAbove(bound))
            #expect(Self.rendered(terms) == ["\\Item.count > \(bound)"])
            #expect(terms.conjuncts == 1)
        }
    }

    @Test func eachOperatorEitherSideFirst() {
        let limit = 9
        let cases: [(Predicate<Item>, String)] = [
            (#Predicate<Item> { $0.count == limit }, "=="), (#Predicate<Item> { $0.count < limit }, "<"),
            (#Predicate<Item> { $0.count <= limit }, "<="), (#Predicate<Item> { $0.count >= limit }, ">="),
            (#Predicate<Item> { limit == $0.count }, "=="), (#Predicate<Item> { limit < $0.count }, ">"),
            (#Predicate<Item> { limit <= $0.count }, ">="), (#Predicate<Item> { limit > $0.count }, "<"),
            (#Predicate<Item> { limit >= $0.count }, "<="),
        ]
        for (predicate, op) in cases {
            #expect(Self.rendered(PredicateShapes.terms(of: predicate)) == ["\\Item.count \(op) 9"])
        }
    }

    @Test func conjunctionsAreLookedThroughAndOtherConjunctsCounted() {
        let name = "kite"
        let mixed = #Predicate<Item> { $0.count > 1 && $0.name.count > 2 && $0.name == name && $0.flag == true }
        let terms = PredicateShapes.terms(of: mixed)
        #expect(Self.rendered(terms) == ["\\Item.count > 1", "\\Item.name == kite", "\\Item.flag == true"])
        #expect(terms.conjuncts == 4)

        // A disjunction, two key paths compared, a negation: one conjunct each, no term.
        let opaque: [Predicate<Item>] = [
            #Predicate<Item> { $0.count == 1 || $0.count == 2 },
            #Predicate<Item> { $0.count == $0.other },
            #Predicate<Item> { !($0.count == 1) },
        ]
        for predicate in opaque {
            let read = PredicateShapes.terms(of: predicate)
            #expect(read.terms.isEmpty)
            #expect(read.conjuncts == 1)
        }
    }

    @Test func aTermKeepsItsKeyPathAndConstantType() throws {
        let id = 41
        let terms = PredicateShapes.terms(of: #Predicate<Item> { $0.id == id && $0.name >= "m" })
        try #require(terms.terms.count == 2)
        #expect(terms.terms[0].keyPath == \Item.id as AnyKeyPath)
        #expect(terms.terms[0].constant as? Int == 41)
        #expect(terms.terms[1].keyPath == \Item.name as AnyKeyPath)
        #expect(terms.terms[1].constant as? String == "m")
    }
}
