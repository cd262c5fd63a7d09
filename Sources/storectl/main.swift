import StoreOps
