// Query planning: walks a `#Predicate`'s expression tree for comparisons of a key path
// with a constant that are anded at its top level. A term on the record id becomes a point
// lookup or a key range; a term on an indexed key path becomes an index range. Everything
// is still evaluated with `Predicate.evaluate` on every candidate, so a plan only narrows
// what is read, never decides a result. Any predicate that compiles runs: shapes the
// planner does not know fall back to a scan of the entity.
import StrataEngine
import Foundation

/// How a fetch reads its candidates.
struct QueryPlan<R: Record> {
    enum Access {
        case point(R.ID)
        case range(lower: [UInt8]?, upper: [UInt8]?)
        /// Index entries in `lower..<upper` (full keys); their values are record ids.
        case index(RecordIndex<R>, lower: [UInt8], upper: [UInt8]?)
        /// The one entry of a unique index under `key` (an equality term on it).
        case indexEntry(RecordIndex<R>, key: [UInt8])
        case scan
    }

    private(set) var access = Access.scan
    /// The terms the access uses, for `explain` (rendered only there: describing a
    /// constant costs more than planning).
    private var usedTerms: [(field: String, op: String, constant: Any)] = []
    private let predicate: Predicate<R>?

    private typealias Term = PlanTerm

    /// Whether what the access reads is exactly what the predicate holds for: every term
    /// is one the access uses, on an id or index whose bytes order and compare as the
    /// values do (`RecordIndex.isExact`). Counting such a plan needs no record decoded;
    /// any other plan's candidates are evaluated one by one.
    private(set) var isExact = false
    /// The index whose order the read follows for a pushed-down sort, and its direction.
    private(set) var sortedBy: (index: RecordIndex<R>, reverse: Bool)?
    /// How many leading components of the index read have an equality term.
    private var equalityComponents = 0
    /// Whether the index answers every term it uses exactly.
    private var exactTerms = false

    init(_ predicate: Predicate<R>?, indexes: [RecordIndex<R>] = []) {
        self.predicate = predicate
        guard let predicate else {
            isExact = true
            return
        }
        let conjuncts = Self.conjuncts(predicate.expression)
        // Loops rather than `compactMap` and `first(where:)` here: generic library code is
        // not specialized for the app's record type, and each call costs thousands of
        // instructions.
        var terms: [Term] = []
        for node in conjuncts { if let term = Self.term(node) { terms.append(term) } }
        let everyTermPlanned = terms.count == conjuncts.count
        if planID(terms) {
            // Integer ids only: a String id's key bytes are its UTF-8 as given, while
            // `==` on strings is canonical equivalence.
            let exactIDs = R.ID.self == Int.self || R.ID.self == Int64.self || R.ID.self == UInt64.self
            isExact = everyTermPlanned && exactIDs && usedTerms.count == terms.count
            return
        }
        planIndex(terms, indexes: indexes)
        if case .scan = access { return }
        isExact = everyTermPlanned && exactTerms && usedTerms.count == terms.count
    }

    /// Reads the records in `sort`'s order through an index when one allows it (a single
    /// sort on an indexed key path whose index order is its value order, and a plan that
    /// reads no other index or id range); false when the sort stays in memory.
    mutating func pushDown(_ sort: [SortDescriptor<R>], indexes: [RecordIndex<R>]) -> Bool {
        // The sorted key path must be an index's last component (ties then come in id
        // order, as a stable sort leaves them), with an equality on every one before it.
        guard sort.count == 1, let keyPath = sort[0].keyPath else { return false }
        var chosen: RecordIndex<R>?
        for index in indexes {
            guard let last = index.components.last, last.sortsExactly, (last.keyPath as AnyKeyPath) == (keyPath as AnyKeyPath) else { continue }
            switch access {
            case .scan where index.components.count == 1: chosen = index
            case let .index(used, _, _) where used.name == index.name && equalityComponents == index.components.count - 1: chosen = index
            default: continue
            }
        }
        guard let index = chosen else { return false }
        if case .scan = access { access = .index(index, lower: index.keyPrefix, upper: keyAfterPrefix(index.keyPrefix)) }
        sortedBy = (index, sort[0].order == .reverse)
        return true
    }

    /// Uses the id terms; true when there were any.
    private mutating func planID(_ terms: [Term]) -> Bool {
        var lower: [UInt8]?
        var upper: [UInt8]?
        for term in terms where Self.isID(term.keyPath) {
            guard let id = term.constant as? R.ID else { continue }
            let bytes = id.keyBytes
            usedTerms.append(("id", term.op, id))
            switch term.op {
            case "==":
                access = .point(id)
                usedTerms = [("id", "==", id)]
                return true
            case ">": lower = Self.larger(lower, bytes + [0])
            case ">=": lower = Self.larger(lower, bytes)
            case "<": upper = Self.smaller(upper, bytes)
            default: upper = Self.smaller(upper, bytes + [0])
            }
        }
        guard lower != nil || upper != nil else { return false }
        access = .range(lower: lower, upper: upper)
        return true
    }

    /// Uses the terms on one index: an equality on a unique index first, then any
    /// equality, then a range. On a compound index, equalities on leading components
    /// narrow the entries to one value's, and the next component's terms a range of them.
    private mutating func planIndex(_ terms: [Term], indexes: [RecordIndex<R>]) {
        // Unique indexes first (a loop, not `filter`: generic code over the app's record
        // type is not specialized, and each call costs thousands of instructions).
        var ranked: [RecordIndex<R>] = []
        ranked.reserveCapacity(indexes.count)
        for unique in [true, false] {
            for index in indexes where index.isUnique == unique { ranked.append(index) }
        }
        for wantEquality in [true, false] {
            for index in ranked {
                guard let reading = Self.read(index, terms) else { continue }
                guard reading.equalities > 0 || !wantEquality else { continue }
                if index.isUnique && reading.equalities == index.components.count {
                    access = .indexEntry(index, key: reading.lower)
                } else {
                    access = .index(index, lower: reading.lower, upper: reading.upper)
                }
                equalityComponents = reading.equalities
                usedTerms = reading.used
                exactTerms = reading.exact
                return
            }
        }
    }

    /// How `index` serves `terms`: the range of entries, the terms it answers, how many
    /// leading components have an equality, and whether it answers them exactly; nil when
    /// it answers none.
    private static func read(_ index: RecordIndex<R>, _ terms: [Term])
        -> (lower: [UInt8], upper: [UInt8]?, used: [(field: String, op: String, constant: Any)], equalities: Int, exact: Bool)? {
        var base = index.keyPrefix
        var lower = base
        var upper = keyAfterPrefix(base)
        var used: [(field: String, op: String, constant: Any)] = []
        var equalities = 0
        var exact = true
        for component in index.components {
            var applicable: [(term: Term, bytes: [UInt8])] = []
            for term in terms where term.keyPath == component.keyPath {
                if let bytes = component.constantBytes(term.constant) { applicable.append((term, bytes)) }
            }
            // An equality fixes this component's value: the next one is read in order
            // under it. (Other terms on the component are left to the evaluation.)
            var found: (term: Term, bytes: [UInt8])?
            for candidate in applicable where candidate.term.op == "==" {
                found = candidate
                break
            }
            if let equality = found {
                base += equality.bytes
                lower = larger(lower, base)
                upper = smallerOptional(upper, keyAfterPrefix(base))
                used.append((component.name, "==", equality.term.constant))
                equalities += 1
                exact = exact && component.isExact
                continue
            }
            for (term, bytes) in applicable {
                let start = base + bytes
                let after = keyAfterPrefix(start)
                switch term.op {
                case ">": if let after { lower = larger(lower, after) } else { upper = lower }
                case ">=": lower = larger(lower, start)
                case "<": upper = smallerOptional(upper, start)
                default: upper = smallerOptional(upper, after)
                }
                used.append((component.name, term.op, term.constant))
                exact = exact && component.rangesExactly
            }
            break
        }
        return used.isEmpty ? nil : (lower, upper, used, equalities, exact)
    }

    /// Narrows the read to what comes after a record (keyset pagination) where the read's
    /// order allows: id order, or a sort read forwards from an index (the record's entry:
    /// `entryBytes` gives its value bytes in an index). Elsewhere the caller filters.
    mutating func startAfter(idBytes: [UInt8], inIDOrder: Bool, entryBytes: (RecordIndex<R>) -> [UInt8]) {
        switch access {
        case let .range(lower, upper) where inIDOrder:
            access = .range(lower: Self.larger(lower, idBytes + [0]), upper: upper)
        case .scan where inIDOrder:
            access = .range(lower: idBytes + [0], upper: nil)
        case let .index(index, lower, upper) where sortedBy.map { !$0.reverse } ?? false:
            // Only from inside the range: on a compound index the read is ordered by the
            // second value under one first value, and an entry elsewhere says nothing of
            // where that order starts.
            let entry = index.keyPrefix + entryBytes(index) + (index.isUnique ? [] : idBytes)
            guard compareKeys(entry, lower) >= 0, upper.map({ compareKeys(entry, $0) < 0 }) ?? true else { return }
            access = .index(index, lower: entry + [0], upper: upper)
        default: break
        }
    }

    func description(entity: String) -> String {
        let read = switch access {
        case let .point(id): "point lookup of \(entity) id \(id)"
        case .range: "key range of \(entity) ids where " + renderedTerms
        case let .index(index, _, _), let .indexEntry(index, _):
            "\(index.isUnique ? "unique " : "")index \(index.name) " + (usedTerms.isEmpty ? "(every entry)" : "where " + renderedTerms)
        case .scan: "scan of every \(entity)"
        }
        let residual = if let predicate {
            isExact ? "no filter: the read is exact" : "evaluate on each candidate: \(predicate)"
        } else {
            "no filter"
        }
        var text = "read: \(read); \(residual)"
        if let sortedBy {
            text += "; sorted by reading index \(sortedBy.index.name) \(sortedBy.reverse ? "backwards" : "forwards")"
        }
        return text
    }

    private var renderedTerms: String {
        usedTerms.map { "\($0.field) \($0.op) \($0.constant)" }.joined(separator: " and ")
    }

    /// The terms anded at the top of an expression.
    private static func conjuncts(_ node: Any) -> [Any] {
        if let and = node as? ConjunctionNode { return conjuncts(and.lhsNode) + conjuncts(and.rhsNode) }
        return [node]
    }

    /// A comparison of the predicate input's key path with a constant, key path first.
    private static func term(_ node: Any) -> Term? {
        let sides: (Any, Any, String)
        if let equal = node as? EqualNode {
            sides = (equal.lhsNode, equal.rhsNode, "==")
        } else if let comparison = node as? ComparisonNode {
            sides = (comparison.lhsNode, comparison.rhsNode, comparison.symbol)
        } else {
            return nil
        }
        if let path = sides.0 as? KeyPathNode, path.rootNode is VariableNode, let value = sides.1 as? ValueNode {
            return Term(keyPath: path.anyKeyPath, op: sides.2, constant: value.constant)
        }
        // `constant < keyPath` is `keyPath > constant`.
        if let path = sides.1 as? KeyPathNode, path.rootNode is VariableNode, let value = sides.0 as? ValueNode {
            let flipped = ["<": ">", "<=": ">=", ">": "<", ">=": "<="][sides.2] ?? sides.2
            return Term(keyPath: path.anyKeyPath, op: flipped, constant: value.constant)
        }
        return nil
    }

    /// Whether `keyPath` is the record's `id`. A generic `\R.id` names the protocol
    /// requirement and never equals the concrete `\Book.id`, so the key path is recognised
    /// by its last component.
    private static func isID(_ keyPath: AnyKeyPath) -> Bool {
        RecordTypeCache.isID(keyPath) {
            let text = "\(keyPath)"
            return text.hasSuffix(".id") && text.dropLast(3).hasSuffix(String(describing: R.self))
        }
    }

    private static func larger(_ a: [UInt8]?, _ b: [UInt8]) -> [UInt8] {
        guard let a else { return b }
        return compareKeys(a, b) >= 0 ? a : b
    }

    private static func smaller(_ a: [UInt8]?, _ b: [UInt8]) -> [UInt8] {
        guard let a else { return b }
        return compareKeys(a, b) <= 0 ? a : b
    }

    private static func smallerOptional(_ a: [UInt8]?, _ b: [UInt8]?) -> [UInt8]? {
        guard let b else { return a }
        return smaller(a, b)
    }
}

// The predicate expression nodes the planner looks into, reached without spelling out
// their generic parameters.
protocol ConjunctionNode { var lhsNode: Any { get }; var rhsNode: Any { get } }
extension PredicateExpressions.Conjunction: ConjunctionNode { var lhsNode: Any { lhs }; var rhsNode: Any { rhs } }
protocol EqualNode { var lhsNode: Any { get }; var rhsNode: Any { get } }
extension PredicateExpressions.Equal: EqualNode { var lhsNode: Any { lhs }; var rhsNode: Any { rhs } }
protocol ComparisonNode { var lhsNode: Any { get }; var rhsNode: Any { get }; var symbol: String { get } }
extension PredicateExpressions.Comparison: ComparisonNode {
    var lhsNode: Any { lhs }
    var rhsNode: Any { rhs }
    var symbol: String {
        switch op {
        case .lessThan: "<"
        case .lessThanOrEqual: "<="
        case .greaterThan: ">"
        case .greaterThanOrEqual: ">="
        @unknown default: "?"
        }
    }
}
protocol KeyPathNode { var anyKeyPath: AnyKeyPath { get }; var rootNode: Any { get } }
extension PredicateExpressions.KeyPath: KeyPathNode { var anyKeyPath: AnyKeyPath { keyPath }; var rootNode: Any { root } }
protocol ValueNode { var constant: Any { get } }
extension PredicateExpressions.Value: ValueNode { var constant: Any { value } }
protocol VariableNode {}
extension PredicateExpressions.Variable: VariableNode {}

/// A comparison of the predicate input's key path with a constant, key path first.
struct PlanTerm {
    var keyPath: AnyKeyPath
    var op: String
    var constant: Any
}
