// Query planning: walks a `#Predicate`'s expression tree for terms on the record id that
// are anded at its top level — `id == constant` becomes a point lookup, `<`, `<=`, `>`,
// `>=` a key range — and leaves everything to `Predicate.evaluate`, which runs on every
// candidate (so a plan only narrows what is read, never decides a result). Any predicate
// that compiles runs: shapes the planner does not know fall back to a scan of the entity.
import Foundation

/// How a fetch reads its candidates.
struct QueryPlan<R: Record> {
    enum Access {
        case point(R.ID)
        case range(lower: [UInt8]?, upper: [UInt8]?)
        case scan
    }

    private(set) var access = Access.scan
    /// The id terms the access uses, for `explain`.
    private(set) var idTerms: [String] = []
    let predicateText: String?

    init(_ predicate: Predicate<R>?) {
        predicateText = predicate.map { "\($0)" }
        guard let predicate else { return }
        var lower: [UInt8]?
        var upper: [UInt8]?
        for term in Self.conjuncts(predicate.expression) {
            guard let (op, id) = idTerm(term) else { continue }
            let bytes = id.keyBytes
            idTerms.append("id \(op) \(id)")
            switch op {
            case "==":
                access = .point(id)
                return
            case ">": lower = Self.larger(lower, bytes + [0])
            case ">=": lower = Self.larger(lower, bytes)
            case "<": upper = Self.smaller(upper, bytes)
            default: upper = Self.smaller(upper, bytes + [0])
            }
        }
        if lower != nil || upper != nil { access = .range(lower: lower, upper: upper) }
    }

    func description(entity: String) -> String {
        let read = switch access {
        case let .point(id): "point lookup of \(entity) id \(id)"
        case .range: "key range of \(entity) ids where " + idTerms.joined(separator: " and ")
        case .scan: "scan of every \(entity)"
        }
        let residual = predicateText.map { "evaluate on each candidate: \($0)" } ?? "no filter"
        return "read: \(read); \(residual)"
    }

    /// The terms anded at the top of an expression.
    private static func conjuncts(_ node: Any) -> [Any] {
        if let and = node as? ConjunctionNode { return conjuncts(and.lhsNode) + conjuncts(and.rhsNode) }
        return [node]
    }

    /// `(operator, id)` when `term` compares the record's id with a constant.
    private func idTerm(_ term: Any) -> (String, R.ID)? {
        if let equal = term as? EqualNode {
            if let id = idConstant(keyPath: equal.lhsNode, value: equal.rhsNode)
                ?? idConstant(keyPath: equal.rhsNode, value: equal.lhsNode) { return ("==", id) }
            return nil
        }
        if let comparison = term as? ComparisonNode {
            if let id = idConstant(keyPath: comparison.lhsNode, value: comparison.rhsNode) { return (comparison.symbol, id) }
            // `constant < id` is `id > constant`.
            if let id = idConstant(keyPath: comparison.rhsNode, value: comparison.lhsNode) {
                let flipped = ["<": ">", "<=": ">=", ">": "<", ">=": "<="][comparison.symbol] ?? comparison.symbol
                return (flipped, id)
            }
        }
        return nil
    }

    /// The constant when `keyPath` is the record's `id` read from the predicate's input.
    private func idConstant(keyPath: Any, value: Any) -> R.ID? {
        guard let path = keyPath as? KeyPathNode, path.rootNode is VariableNode,
              let constant = (value as? ValueNode)?.constant as? R.ID else { return nil }
        // A generic `\R.id` names the protocol requirement and never equals the concrete
        // `\Book.id`, so the key path is recognised by its last component.
        let text = "\(path.anyKeyPath)"
        guard text.hasSuffix(".id"), text.dropLast(3).hasSuffix(String(describing: R.self)) else { return nil }
        return constant
    }

    private static func larger(_ a: [UInt8]?, _ b: [UInt8]) -> [UInt8] {
        guard let a else { return b }
        return compareKeys(a, b) >= 0 ? a : b
    }

    private static func smaller(_ a: [UInt8]?, _ b: [UInt8]) -> [UInt8] {
        guard let a else { return b }
        return compareKeys(a, b) <= 0 ? a : b
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
