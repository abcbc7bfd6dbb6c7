/* Link-time stand-in for the driver's libcuda.so.1; deleted after linking, as off-device. */
int cuStubInit(void) { return 0; }
