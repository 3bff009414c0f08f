// Reading a predicate's terms without a dynamic cast per node. A `#Predicate` written in
// one place always has the same expression type (its constants differ from call to call,
// never its shape), so the first time a type is seen its shape is learned, with casts and
// field offsets, and compiled into closures that read the terms out of any expression of
// that type by offset. Later fetches with that predicate pay one table lookup instead of
// a dozen conformance casts (~6,000 instructions each time, measured under callgrind).
//
// Which nodes are terms is decided exactly as a walk with casts would decide it: a
// conjunction is looked through; `==` and the four orderings between the predicate
// input's key path (`$0.field`) and a constant, either side first, are terms; anything
// else is one conjunct the planner does not use (it is evaluated on each candidate).
//
// Thread-safety: readers are immutable once made; the table is behind a `Mutex`. Types
// are never unloaded, so an `ObjectIdentifier` of one is never reused.
import StrataContexts
import Foundation
import Synchronization

/// A comparison operator of a term, key path first.
enum PlanOperator: UInt8, Sendable {
    case equal, less, lessOrEqual, greater, greaterOrEqual

    /// The operator with its sides swapped: `constant < field` is `field > constant`.
    var flipped: PlanOperator {
        switch self {
        case .equal: .equal
        case .less: .greater
        case .lessOrEqual: .greaterOrEqual
        case .greater: .less
        case .greaterOrEqual: .lessOrEqual
        }
    }

    var symbol: String {
        switch self {
        case .equal: "=="
        case .less: "<"
        case .lessOrEqual: "<="
        case .greater: ">"
        case .greaterOrEqual: ">="
        }
    }

    init(_ op: PredicateExpressions.ComparisonOperator) {
        switch op {
        case .lessThan: self = .less
        case .lessThanOrEqual: self = .lessOrEqual
        case .greaterThan: self = .greater
        default: self = .greaterOrEqual
        }
    }
}

/// A comparison of the predicate input's key path with a constant, key path first.
struct PlanTerm {
    var keyPath: AnyKeyPath
    var op: PlanOperator
    var constant: Any
}

/// The terms anded at the top of a predicate, and how many conjuncts there are in all
/// (more than terms when some conjunct is not a comparison the planner knows).
@usableFromInline
struct PredicateTerms {
    var terms: [PlanTerm] = []
    var conjuncts = 0
}

/// Reads a node (of the type it was made for, at the pointer) into the terms.
typealias NodeReader = @Sendable (_ node: UnsafeRawPointer, _ into: inout PredicateTerms) -> Void

/// What a node type is to the planner.
enum NodeShape: Sendable {
    /// A conjunction or a term: reads itself.
    case conjunct(NodeReader)
    /// `$0.field` when the root is the input (`rootIsInput`): where its key path lies.
    case keyPath(offset: Int, rootIsInput: Bool)
    /// A constant: reads it.
    case constant(@Sendable (UnsafeRawPointer) -> Any)
    case other
}

@usableFromInline
enum PredicateShapes {
    private static let readers = Mutex<[ObjectIdentifier: NodeReader]>([:])

    /// The terms of `predicate`'s expression.
    @usableFromInline
    static func terms<each Input>(of predicate: Predicate<repeat each Input>) -> PredicateTerms {
        read(predicate.expression)
    }

    private static func read<E: StandardPredicateExpression<Bool>>(_ expression: E) -> PredicateTerms {
        let reader = reader(for: E.self)
        var terms = PredicateTerms()
        withUnsafePointer(to: expression) { reader(UnsafeRawPointer($0), &terms) }
        return terms
    }

    /// The reader of a conjunct of `type`, made the first time it is asked for.
    static func reader(for type: Any.Type) -> NodeReader {
        if let known = readers.withLock({ $0[ObjectIdentifier(type)] }) { return known }
        let made: NodeReader = if case let .conjunct(reader) = shape(of: type) { reader } else { { _, into in into.conjuncts += 1 } }
        readers.withLock { $0[ObjectIdentifier(type)] = made }
        return made
    }

    static func shape(of type: Any.Type) -> NodeShape {
        (type as? any ShapedNode.Type)?.shape ?? .other
    }

    /// The reader of a comparison whose sides lie at `lhs` and `rhs` in the node: a term
    /// when one side is the input's key path and the other a constant.
    static func comparison(lhs: (type: Any.Type, offset: Int), rhs: (type: Any.Type, offset: Int),
                           op: @escaping @Sendable (UnsafeRawPointer) -> PlanOperator) -> NodeShape {
        func term(path: (shape: NodeShape, offset: Int), constant: (shape: NodeShape, offset: Int), flipped: Bool) -> NodeShape? {
            guard case let .keyPath(keyPathOffset, true) = path.shape, case let .constant(read) = constant.shape else { return nil }
            let keyPathAt = path.offset + keyPathOffset, constantAt = constant.offset
            return .conjunct { node, into in
                let keyPath = (node + keyPathAt).load(as: AnyKeyPath.self)
                let op = op(node)
                into.terms.append(PlanTerm(keyPath: keyPath, op: flipped ? op.flipped : op, constant: read(node + constantAt)))
                into.conjuncts += 1
            }
        }
        let left = (shape(of: lhs.type), lhs.offset), right = (shape(of: rhs.type), rhs.offset)
        return term(path: left, constant: right, flipped: false) ?? term(path: right, constant: left, flipped: true) ?? .other
    }
}

/// A predicate expression node the planner can look into.
protocol ShapedNode {
    static var shape: NodeShape { get }
}

/// The offset of a stored field, which every expression node's `let` fields have. The key
/// path's value type is spelled out at each use, so a field whose type changes in
/// Foundation stops the build instead of being read as something else.
private func offset<T, V>(_ field: KeyPath<T, V>) -> Int? { MemoryLayout<T>.offset(of: field) }

extension PredicateExpressions.Conjunction: ShapedNode {
    static var shape: NodeShape {
        guard let lhsAt = offset(\Self.lhs as KeyPath<Self, LHS>), let rhsAt = offset(\Self.rhs as KeyPath<Self, RHS>) else { return .other }
        let left = PredicateShapes.reader(for: LHS.self), right = PredicateShapes.reader(for: RHS.self)
        return .conjunct { node, into in
            left(node + lhsAt, &into)
            right(node + rhsAt, &into)
        }
    }
}

extension PredicateExpressions.Equal: ShapedNode {
    static var shape: NodeShape {
        guard let lhsAt = offset(\Self.lhs as KeyPath<Self, LHS>), let rhsAt = offset(\Self.rhs as KeyPath<Self, RHS>) else { return .other }
        return PredicateShapes.comparison(lhs: (LHS.self, lhsAt), rhs: (RHS.self, rhsAt)) { _ in .equal }
    }
}

extension PredicateExpressions.Comparison: ShapedNode {
    static var shape: NodeShape {
        guard let lhsAt = offset(\Self.lhs as KeyPath<Self, LHS>), let rhsAt = offset(\Self.rhs as KeyPath<Self, RHS>),
              let opAt = offset(\Self.op as KeyPath<Self, PredicateExpressions.ComparisonOperator>) else { return .other }
        return PredicateShapes.comparison(lhs: (LHS.self, lhsAt), rhs: (RHS.self, rhsAt)) { node in
            PlanOperator((node + opAt).load(as: PredicateExpressions.ComparisonOperator.self))
        }
    }
}

extension PredicateExpressions.KeyPath: ShapedNode {
    static var shape: NodeShape {
        // The field is a `KeyPath & Sendable`: a class reference, read as `AnyKeyPath`.
        guard let at = offset(\Self.keyPath as KeyPath<Self, Swift.KeyPath<Root.Output, Output> & Sendable>) else { return .other }
        return .keyPath(offset: at, rootIsInput: Root.self is any InputNode.Type)
    }
}

extension PredicateExpressions.Value: ShapedNode {
    static var shape: NodeShape {
        guard let at = offset(\Self.value as KeyPath<Self, Output>) else { return .other }
        return .constant { node in (node + at).assumingMemoryBound(to: Output.self).pointee }
    }
}

/// The predicate's input (`$0`).
protocol InputNode {}
extension PredicateExpressions.Variable: InputNode {}
