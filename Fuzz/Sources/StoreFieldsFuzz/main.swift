// libFuzzer's entry point for the `StoreFields` target; its body and its promises are
// `FuzzTargets.storeFields` in StrataTesting (Fuzz/README.md).
import StrataTesting

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzTargets.storeFields(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
