// libFuzzer's entry point for the `StoreLog` target; its body and its promises are
// `FuzzTargets.storeLog` in StrataTesting (Fuzz/README.md).
import StrataTesting

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzTargets.storeLog(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
