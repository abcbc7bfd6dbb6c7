/* A stand-in for one of vLLM's compiled extensions (vllm/_C*.abi3.so), for the probe tests.
 * -DNAME=<module> names it; -DNEED_DRIVER_SYMBOL references a CUDA driver symbol that nothing
 * defines (dlopen fails: undefined symbol); -DNEED_LIBCUDA links a libcuda.so.1 that the image
 * does not have (dlopen fails: cannot open shared object file); -DCRASH segfaults on import. */
#include <Python.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define STR2(x) #x
#define STR(x) STR2(x)

#ifdef NEED_DRIVER_SYMBOL
extern int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr);
#endif
#ifdef NEED_LIBCUDA
extern int cuStubInit(void);
#endif

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, STR(NAME), NULL, -1, NULL};

PyMODINIT_FUNC CAT(PyInit_, NAME)(void) {
#ifdef NEED_DRIVER_SYMBOL
    if (cuPointerGetAttribute(0, 0, 0)) return NULL;
#endif
#ifdef NEED_LIBCUDA
    if (cuStubInit()) return NULL;
#endif
#ifdef CRASH
    volatile int *nowhere = 0;
    *nowhere = 1;
#endif
    return PyModule_Create(&module_def);
}
