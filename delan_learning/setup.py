from setuptools import find_packages, setup

package_name = 'delan_learning'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    # the C source of the compiled DeLaN kernel, built at first use (delan_learning.c_kernel)
    package_data={package_name: ['delan_kernel.c']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
    ],
    install_requires=['setuptools'],
    zip_safe=False,
    maintainer='delan_ros maintainers',
    maintainer_email='maintainers@delan-ros.invalid',
    description='Deep Lagrangian Networks: ROS-free core and ROS 2 nodes.',
    license='BSD-3-Clause',
    extras_require={'test': ['pytest']},
    entry_points={
        'console_scripts': [
            'learner = delan_learning.nodes.learner:main',
            'data_logger = delan_learning.nodes.data_logger:main',
            'delan-train = delan_learning.cli:train_main',
            'delan-eval = delan_learning.cli:eval_main',
            'delan-bag2npz = delan_learning.bag_cli:main',
        ],
    },
)
